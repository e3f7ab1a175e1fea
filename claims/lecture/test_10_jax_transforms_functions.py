"""Lecture, "JAX transforms functions" (L:112-139).

"jax.grad(f) does not compute a gradient. It returns a new function that computes one. There is
no tape, no mutable .grad, and consequently nothing to zero." "for the loss above it is seven
equations" ... "a longer one, sixteen equations" ... "The tanh derivative shows up as an
explicit 1 - i multiplied through." "a Python if that depends on the value of an array cannot
be traced." ... "a loop whose length depends on data needs jax.lax.while_loop ... any side
effect ... runs once at trace time and then never again."
Protocol §4.4: make_jaxpr over the toy loss with x64 on and strongly typed f64 inputs.
"""
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from support.rules.controls import control
from support.lab import toy
from support.lab.jaxutil import refusal, x64
from support.harness import device_marks
from support.machine import devices

FORWARD = ["dot_general", "add", "tanh", "dot_general", "add", "sub", "integer_pow"]


def _jaxprs():
    t = toy.draw()
    with x64():
        args = toy.jax_args(t)
        return (jax.make_jaxpr(toy.jax_loss)(*args),
                jax.make_jaxpr(jax.grad(toy.jax_loss))(*args))


@pytest.fixture
def jaxprs():
    # per test (milliseconds): a negative control of jax.numpy then reaches the programs
    return _jaxprs()


def _jax_grad_returning(mp, change):
    """jax.grad, its gradient function's result passed through ``change(value, state)``."""
    real = jax.grad

    def grad(fun, *args, **kwargs):
        g, state = real(fun, *args, **kwargs), {}
        return lambda *a, **k: change(g(*a, **k), state)
    mp.setattr(jax, "grad", grad)


@pytest.mark.claim("JAX-04")
def test_grad_returns_a_function_with_nothing_to_zero(claim):
    t = toy.draw()
    gfun = jax.grad(toy.jax_loss)
    with x64():
        args = toy.jax_args(t)
        g1, g2 = gfun(*args), gfun(*args)
    same = all(np.array_equal(g1[k], g2[k]) for k in g1)
    claim.record('returns_callable', callable(gfun))
    claim.record('repeated_calls_identical', same)
    assert callable(gfun) and not isinstance(gfun, jax.Array)
    assert same                                  # no accumulation between calls
    assert not hasattr(args[0]["W"], "grad")     # no mutable .grad on the arrays


@control("JAX-04", what="the function jax.grad returns accumulates: each call adds the previous "
                        "calls' gradients, like a .grad nobody zeroed")
def grad_function_accumulates(mp):
    def accumulate(g, state):
        state["sum"] = g if "sum" not in state else jax.tree_util.tree_map(
            jnp.add, state["sum"], g)
        return state["sum"]
    _jax_grad_returning(mp, accumulate)


@pytest.mark.claim("JAX-05")
def test_gradient_has_the_structure_of_params(claim):
    params = {"layer": {"W": jnp.ones((2, 3)), "b": jnp.zeros(2)}, "c": jnp.float32(0.5)}
    f = lambda p: jnp.sum(jnp.tanh(p["layer"]["W"] @ jnp.ones(3) + p["layer"]["b"])) * p["c"]
    g = jax.grad(f)(params)
    same = jax.tree_util.tree_structure(g) == jax.tree_util.tree_structure(params)
    claim.record('same_treedef', same)
    assert same, f"the gradient is a {jax.tree_util.tree_structure(g)}"
    shapes = jax.tree_util.tree_map(lambda a, b: a.shape == b.shape, g, params)
    assert all(jax.tree_util.tree_leaves(shapes))


@control("JAX-05", what="jax.grad returns the gradient as a flat list of arrays, not in the "
                        "structure of the parameters")
def grad_flattens_the_tree(mp):
    _jax_grad_returning(mp, lambda g, state: jax.tree_util.tree_leaves(g))


@pytest.mark.claim("JIT-09")
def test_the_toy_loss_jaxpr_has_seven_equations(claim, jaxprs):
    fwd, _ = jaxprs
    prims = [e.primitive.name for e in fwd.jaxpr.eqns]
    claim.check('n_equations', len(prims))
    claim.record("primitives", prims)
    claim.check('integer_pow_param_y', fwd.jaxpr.eqns[-1].params.get('y'))
    text = str(fwd)
    assert prims == FORWARD
    assert "a:f64[3,4] b:f64[3] c:f64[] d:f64[3] e:f64[4] f:f64[]" in text
    # the version-sensitive part (weak types): a Python-float y adds a convert_element_type
    with x64():
        p, x, _ = toy.jax_args(toy.draw())
        weak = jax.make_jaxpr(toy.jax_loss)(p, x, 1.234)
    claim.record("n_equations_with_python_float_y", len(weak.jaxpr.eqns))


@control("JIT-09", "JIT-10", moves=("n_equations",),
         what="jnp.tanh is traced as its exponential formula, several equations and no tanh "
              "primitive")
def tanh_traced_as_exponentials(mp):
    mp.setattr(jnp, "tanh", lambda x: (jnp.exp(2 * x) - 1) / (jnp.exp(2 * x) + 1))


@pytest.mark.claim("JIT-24")
@pytest.mark.parametrize("transform", ["jit", "make_jaxpr", "grad"])
def test_value_dependent_if_cannot_be_traced_and_side_effects_run_once(claim, transform):
    """'jax.grad ... traces ... a Python if that depends on the value ... cannot be traced',
    'any side effect ... runs once at trace time and then never again'."""
    calls = []

    def f(x):
        calls.append(1)
        if x > 0:
            return x ** 3
        return -x
    wrap = {"jit": jax.jit, "make_jaxpr": jax.make_jaxpr, "grad": jax.grad}[transform]
    try:
        results = [wrap(f)(2.0), wrap(f)(-1.0), wrap(f)(2.0)]
        traced = False
        claim.record("results", [str(r) if transform == "make_jaxpr" else float(r)
                                 for r in results])
    except jax.errors.ConcretizationTypeError:
        traced = True
    claim.check('value_dependent_if_rejected', traced)
    claim.record("side_effect_runs", len(calls))


@control("JIT-24", what="jax.jit and jax.make_jaxpr run the Python function on the values it "
                        "is called with instead of tracing it")
def jit_and_make_jaxpr_run_on_values(mp):
    mp.setattr(jax, "jit", lambda fun, *args, **kwargs: fun)
    mp.setattr(jax, "make_jaxpr", lambda fun, *args, **kwargs: fun)


@control("JIT-24", expect="holds",
         what="jax.grad traces like jax.jit (the gradient function is staged out with abstract "
              "tracers that carry no values), so a value-dependent Python if cannot be traced "
              "under it either")
def grad_traces_like_jit(mp):
    real = jax.grad
    mp.setattr(jax, "grad", lambda fun, *args, **kwargs: jax.jit(real(fun, *args, **kwargs)))


@pytest.mark.claim("JIT-10")
def test_the_gradient_program_has_sixteen_equations(claim, jaxprs):
    fwd, grad = jaxprs
    n = len(grad.jaxpr.eqns)
    claim.check('n_equations', n)
    prims = [e.primitive.name for e in grad.jaxpr.eqns]
    forward = [e.primitive.name for e in fwd.jaxpr.eqns]
    claim.record("primitives", prims)
    # "a longer one ... that computes the forward pass and the backward pass together": the
    # forward program's equations, in their order, inside one longer program, whatever
    # primitives this release traces them as
    inside = _in_order(forward, prims)
    claim.record("the forward program's equations appear in order", inside)
    assert n > len(forward)
    assert inside, f"the forward pass {forward} is not inside the gradient program {prims}"


def _in_order(sub: list[str], seq: list[str]) -> bool:
    """Whether ``sub`` is a subsequence of ``seq`` (every item, in order, gaps allowed)."""
    it = iter(seq)
    return all(x in it for x in sub)


@control("JIT-10", what="jax.grad runs the forward pass as a separate compiled call (jax.jit of "
                        "the function, then its pullback): the gradient's program holds calls "
                        "of other programs, not the forward and backward passes together")
def grad_runs_the_forward_apart(mp):
    # the sentence's own point, one program: the same derivative, its forward pass staged out
    # as a program of its own (a pjit equation) instead of inlined beside the backward pass
    def grad(fun, argnums=0, **kwargs):
        def gradient(*args):
            _, pullback = jax.vjp(jax.jit(fun), *args)
            return pullback(1.0)[argnums]
        return gradient
    mp.setattr(jax, "grad", grad)


@pytest.mark.claim("JIT-11")
def test_tanh_derivative_appears_as_one_minus_i_multiplied_through(claim, jaxprs):
    _, grad = jaxprs
    eqns = grad.jaxpr.eqns
    tanh_out = next(e.outvars[0] for e in eqns if e.primitive.name == "tanh")
    # as the notes print it: sub 1.0 and the tanh output (i) ...
    one_minus = [e for e in eqns if e.primitive.name == "sub"
                 and any(getattr(v, "val", None) is not None and float(v.val) == 1.0
                         for v in e.invars)
                 and tanh_out in e.invars]
    # ... or fused into one primitive of the output (JAX 0.12: one_minus_square i)
    fused = [e for e in eqns if e.primitive.name == "one_minus_square"
             and tanh_out in e.invars]
    claim.check("one_minus_tanh_equations", len(one_minus))
    claim.record("form", [e.primitive.name for e in one_minus + fused])
    derivative = one_minus + fused
    assert derivative, "no equation computes 1 - tanh from the stored tanh output"
    used_in_mul = [e for e in eqns if e.primitive.name == "mul"
                   and derivative[0].outvars[0] in e.invars]
    claim.record("multiplied_through", bool(used_in_mul))
    assert used_in_mul, "the tanh derivative is not multiplied into the chain"


@control("JIT-11", what="jnp.tanh's derivative is computed afresh as 1/cosh(x)^2, not as 1 - i "
                        "from the stored output i")
def tanh_derivative_from_cosh(mp):
    @jax.custom_jvp
    def tanh(x):
        return jax.lax.tanh(x)

    @tanh.defjvp
    def _(primals, tangents):
        (x,), (dx,) = primals, tangents
        return jax.lax.tanh(x), dx / jnp.cosh(x) ** 2
    mp.setattr(jnp, "tanh", tanh)


@pytest.mark.claim("JIT-12")
def test_grad_of_grad_differentiates_twice(claim):
    d2 = float(jax.grad(jax.grad(lambda x: x ** 3))(2.0))
    claim.check('second_derivative_of_x3_at_2', d2)


@control("JIT-12", what="what jax.grad returns is a constant to an outer jax.grad (its output "
                        "passes through stop_gradient), so grad of grad is zero")
def gradient_is_not_differentiable(mp):
    _jax_grad_returning(mp, lambda g, state: jax.tree_util.tree_map(jax.lax.stop_gradient, g))


@pytest.mark.claim("JIT-13")
@pytest.mark.parametrize("device", device_marks.params("jax:cpu", "jax:gpu"))
def test_jit_compiles_through_xla(claim, device):
    """"jax.jit compiles the result through XLA, the compiler JAX uses to generate code for
    CPUs, GPUs and TPUs": XLA's program for each device this machine has, its GPU half the
    required variant (a TPU no machine of the suite's has)."""
    here = devices.jax_device(device)
    f = jax.jit(lambda x: jnp.tanh(x) * 2.0)
    x = jax.device_put(jnp.ones(3), here)
    lowered = f.lower(x)
    text = lowered.as_text()
    compiled = lowered.compile()
    out = compiled(x)
    claim.record("lowered_dialect", "stablehlo" if "stablehlo" in text else text.split()[0])
    claim.record("backend", here.platform)
    assert "stablehlo" in text or "HloModule" in text
    assert out.devices() == {here}, f"XLA's program ran on {out.devices()}, not {here}"
    assert np.allclose(np.asarray(out), np.tanh(1.0) * 2.0)


@control("JIT-13", what="jax.jit hands nothing to XLA: it lowers to the jaxpr and runs it op by "
                        "op")
def jit_interprets_the_jaxpr(mp):
    def jit(fun, **kwargs):
        lower = lambda *a: SimpleNamespace(as_text=lambda: str(jax.make_jaxpr(fun)(*a)),
                                           compile=lambda: fun)
        return SimpleNamespace(lower=lower)
    mp.setattr(jax, "jit", jit)


@pytest.mark.claim("JIT-14")
def test_data_dependent_loop_needs_while_loop(claim):
    def halve_python(x):
        while x > 1.0:
            x = x / 2
        return x

    def halve_lax(x):
        return jax.lax.while_loop(lambda v: v > 1.0, lambda v: v / 2, x)
    refused = refusal(jax.jit(halve_python), 10.0)
    claim.record("python_while_error", refused)
    assert refused, "jit ran a Python while on a traced value"
    got, eager = float(jax.jit(halve_lax)(10.0)), halve_python(10.0)
    claim.record('while_loop_result', got)
    assert got == eager == 0.625


@control("JIT-14", what="jax.lax.while_loop stops one iteration early (it tests its condition on "
                        "the value the next iteration would give)")
def while_loop_stops_early(mp):
    real = jax.lax.while_loop
    mp.setattr(jax.lax, "while_loop",
               lambda cond, body, init: real(lambda v: cond(body(v)), body, init))


@pytest.mark.claim("JIT-15")
def test_jitted_function_cannot_modify_its_input(claim):
    def bump(x):
        x[0] = 1.0
        return x
    msgs = []
    for f in (bump, jax.jit(bump)):
        try:
            f(jnp.zeros(3))
            msgs.append("")
        except TypeError as err:
            msgs.append(str(err).splitlines()[0][:80])
    claim.record("errors", msgs)
    assert all(msgs), f"item assignment on a jax.Array ran (eager, jit): {msgs}"
    arr = jnp.zeros(3)
    out = jax.jit(lambda x: x.at[0].set(1.0))(arr)
    assert float(arr[0]) == 0.0 and float(out[0]) == 1.0


@control("JIT-15", what="item assignment on a jax.Array, eager or traced, is silently accepted "
                        "instead of refused")
def item_assignment_accepted(mp):
    for cls in (type(jnp.zeros(())), jax.core.Tracer):
        mp.setattr(cls, "__setitem__", lambda self, index, value: None)
