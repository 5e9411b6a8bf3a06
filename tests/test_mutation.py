"""The suites' mutation testing (autograder/authoring/mutation.py, `make mutation`) is itself right: each course
operator makes the slip it says, every mutant compiles and differs from the reference, the oracle sets aside a
mutant that meets the contract and shows one that does not, and a mutant graded by the real engine is caught."""
import pytest
from cosmic_ray.mutating import MutationVisitor

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
