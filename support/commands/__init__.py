"""The commands: one module per ``python -m support`` command, the top wing.

Each command module holds the command's arguments (``arguments(parser)``), its printing and
its exit status (``run(args) -> int``), and calls into the wings below for the work: ``show``,
``matrix``, ``figures``, ``diff``, ``keep`` (reports), ``notes``, ``locate``, ``pin`` (the
notes), ``fetch_data``, ``check_data`` (the data), ``durations``, ``new_claim``,
``check_claim``, ``controls``, ``stability``, ``load_sensitivity`` and ``gpu_run``. Beside them
live what only commands use: the runners that start pytest sessions of the suite
(``control_runner``, ``suite_runs``, ``gpu_steps``, ``step_process``, ``gpu_reports``), where
reaching into claims/ is expected, and the checks one new or changed claim must pass
(``claim_checks``). ``support/cli.py`` names each command's module. It may import every other
wing; none imports it.
"""
