"""The suites' mutation testing (autograder/authoring/mutation.py, `make mutation`) is itself right: each course
operator makes the slip it says, every mutant compiles and differs from the reference, the oracle sets aside a
mutant that meets the contract and shows one that does not, and a mutant graded by the real engine is caught."""
import subprocess
import sys

import pytest
from cosmic_ray.mutating import MutationVisitor

from autograder import ROOT
from autograder.authoring import mutants, mutation, variants


@pytest.mark.parametrize("name", sorted(mutants.COURSE_OPERATORS))
def test_each_course_operator_makes_its_examples(name):
    op = mutants.COURSE_OPERATORS[name]
    for example in op.examples():
        got = MutationVisitor.mutate_code(example.pre_mutation_code, op(), example.occurrence)
        assert got == example.post_mutation_code, (name, example)


def test_mutants_compile_differ_and_include_the_whole_function_slips():
    source = variants.reference_sources("attention")["blockwise_attention"]
    found = mutants.mutants("blockwise_attention", source)
    assert len(found) > 100
    assert len({m.source for m in found}) == len(found)
    for m in found:
        assert m.source != source
        compile(m.source, m.name, "exec")
    operators = {m.operator.split("_")[0] for m in found}
    assert {"DropCall", "DropKeyword", "SwapArguments", "InPlace", "FiniteInfinity", "OffByOne", "LoopExitsEarly",
            "CacheBySize", "NumberReplacer", "ReplaceBinaryOperator", "ReplaceComparisonOperator"} <= operators
    assert not any(">>" in m.after and ">>" not in m.before for m in found)    # operators stay in their family


def test_the_oracle_tells_a_wrong_mutant_from_an_equivalent_one():
    oracle = mutation.Oracle("attention", "causal_mask", draws=20)
    found = {m.operator: m for m in mutants.mutants("causal_mask", variants.reference_sources("attention")
                                                     ["causal_mask"])}
    assert "device" in (oracle.witness_in_child(found["DropKeyword"]) or "")
    assert oracle.witness_in_child(found["InPlace"]) is None         # tril_ on a fresh tensor: the same answer
    cached = oracle.witness_in_child(found["CacheBySize"])     # the same size again, on another device
    assert cached is not None and "on the device" in cached


def test_a_mutant_is_graded_by_its_own_tests_and_caught():
    source = variants.reference_sources("attention")["causal_mask"]
    mutant = next(m for m in mutants.mutants("causal_mask", source) if m.operator == "DropCall")
    score, points, said = mutation.grade("attention", mutant, mutation.settings())
    assert score < points, said


@pytest.mark.full     # too long for make test (docs/testing.md)
def test_a_kernel_part_is_judged_through_its_launcher():
    """A Triton exercise's graded part is a kernel, not a CONTRACT part: the oracle runs each mutant through the
    course's launcher of it in Triton's interpreter; a capped run takes mutants spread evenly over them all."""
    from autograder.verdict.suites import test_fused_attention as suite

    assert mutation.contract_name(suite, "attention_kernel") == "flash_attention"
    assert mutation.contract_name(suite, "flash_attention") == "flash_attention"
    with pytest.raises(KeyError):
        mutation.contract_name(suite, "no_such_kernel")
    found = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert mutation.sample(found, 3) == [1, 4, 7] and mutation.sample(found, None) == found
    # The interpreter is chosen when triton is first imported, which another test may have done: a fresh process.
    script = """
import os
os.environ["TRITON_INTERPRET"] = "1"
from autograder.authoring import mutants, mutation, variants
found = mutants.mutants("attention_kernel", variants.reference_sources("fused_attention")["attention_kernel"])
oracle = mutation.Oracle("fused_attention", "attention_kernel", draws=2)
assert oracle.launcher == "flash_attention" and len(oracle.calls) <= mutation.KERNEL_DRAWS + 5
causal = next(m for m in found if "keys[None, :] < rows[:, None]" in m.after)        # the diagonal left out
assert oracle.witness_in_child(causal) is not None
warps = next(m for m in found if "NUM_WARPS, NUM_STAGES = 5, 2" in m.after)    # the interpreter has no warps
assert oracle.witness_in_child(warps) is None
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_kernel_oracle_refuses_a_compiled_triton():
    """Where triton was first imported without its interpreter, the reference kernel raises on every call and every
    mutant would be "equivalent": the oracle says so instead."""
    script = """
import os
os.environ.pop("TRITON_INTERPRET", None)
import triton
from autograder.authoring import mutation
try:
    mutation.Oracle("fused_attention", "attention_kernel", draws=1)
except RuntimeError as e:
    assert "TRITON_INTERPRET" in str(e), e
else:
    raise AssertionError("no error")
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
