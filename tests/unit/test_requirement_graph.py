"""Extras in use, decided over the whole requirement graph: every installed distribution's
requirements (markers evaluated for the host, ``extra`` empty) plus those of every extra that
something in the graph asks for, transitively. The shapes are the real stacks' (vllm 0.33 with
flashinfer-python, cuda-toolkit, humming-kernels) and the seed story's (speculators [datagen])."""

from __future__ import annotations

from envdoctor.engine.facts import Distribution
from envdoctor.install.consistency import check_environment, environment_graph
from tests.unit.fakes import dist, env

NVCC_PIN = "nvidia-cuda-nvcc==13.0.88.*; sys_platform == 'linux' and extra == 'nvcc'"


def extras_lines(*dists: Distribution) -> list[str]:
    found = check_environment(env("/v", *dists))
    assert found.pip_ok, found.pip_lines()
    return [u.extra_line() for u in found.extras]


def cuda_stack(vllm_asks: str) -> list[Distribution]:
    """torch asks for cuda-toolkit[cublas]; cuda-toolkit's `nvcc` extra pins nvidia-cuda-nvcc,
    which is installed (newer) because vllm asks for humming-kernels ``vllm_asks``."""
    return [
        dist("torch", "2.14.0", "cuda-toolkit[cublas]==13.0.3; platform_system == 'Linux'"),
        dist("cuda-toolkit", "13.0.3.0", "nvidia-cublas==13.1.*; extra == 'cublas'", NVCC_PIN),
        dist("nvidia-cublas", "13.1.0.3"),
        dist("vllm", "0.33.0", f"humming-kernels{vllm_asks}==0.1.19", "torch==2.14.0"),
        dist("humming-kernels", "0.1.19", "nvidia-cuda-nvcc; extra == 'cu13'"),
        dist("nvidia-cuda-nvcc", "13.5.37"),
    ]


def test_a_package_an_asked_extra_requires_is_there_for_that_reason():
    """nvidia-cuda-nvcc comes with humming-kernels[cu13], which vllm asks for: cuda-toolkit's
    `nvcc` extra, which nobody asks for, is not in use and its pin is not judged."""
    assert extras_lines(*cuda_stack("[cu13]")) == []


def test_without_the_ask_the_package_is_there_for_no_other_reason():
    """The same files with vllm asking for plain humming-kernels: nothing in the graph requires
    nvidia-cuda-nvcc, so the one extra that names it is taken to be in use, and its pin fails."""
    assert extras_lines(*cuda_stack("")) == [
        "cuda-toolkit 13.0.3.0 [nvcc] requires nvidia-cuda-nvcc==13.0.88.*; 13.5.37 is installed"]


def test_an_extra_whose_package_another_distribution_pins_is_not_in_use():
    """flashinfer-python [b12x] pins nvidia-cutlass-dsl==4.7.1; vllm requires
    nvidia-cutlass-dsl[cu13]==4.8.0 (uv pip check and pip check: compatible)."""
    assert extras_lines(
        dist("vllm", "0.33.0", "nvidia-cutlass-dsl[cu13]==4.8.0", "flashinfer-python==0.7.2.post1"),
        dist("flashinfer-python", "0.7.2.post1", "nvidia-cutlass-dsl>=4.6.2a0",
             "nvidia-cutlass-dsl==4.7.1; extra == \"b12x\"", "nvidia-cutlass-dsl-libs-cu13==4.7.1; extra == \"b12x\""),
        dist("nvidia-cutlass-dsl", "4.8.0", "nvidia-cutlass-dsl-libs-cu13==4.8.0; extra == \"cu13\""),
        dist("nvidia-cutlass-dsl-libs-cu13", "4.8.0"),
    ) == []


def test_extras_are_asked_for_transitively():
    """a asks for b[x], b[x] for c[y], c[y] requires d: d is there for c, and e's `z` extra
    (pinning d==1) shows no use. With a asking for plain b, d has no other reason: e[z] is in use."""
    rest = [dist("b", "1.0", "c[y]; extra == 'x'"), dist("c", "1.0", "d; extra == 'y'"), dist("d", "2.0"),
            dist("e", "1.0", "d==1; extra == 'z'")]
    assert extras_lines(dist("a", "1.0", "b[x]"), *rest) == []
    assert extras_lines(dist("a", "1.0", "b"), *rest) == ["e 1.0 [z] requires d==1; 2.0 is installed"]


def test_the_graph_holds_each_asked_extra_and_who_requires_what():
    """environment_graph: the asked (name, extra) pairs, transitively, and the nodes requiring each name."""
    venv = env("/v", dist("a", "1.0", "b[x]"), dist("b", "1.0", "c[y]; extra == 'x'", "q; extra == 'w'"),
               dist("c", "1.0", "d; extra == 'y'", "missing[m]; extra == 'y'"), dist("d", "2.0"))
    graph = environment_graph(venv)
    assert graph.asked == {("b", "x"), ("c", "y"), ("missing", "m")}
    assert graph.required_by["d"] == {("c", "y")}
    assert graph.required_by["c"] == {("b", "x")}
    assert "q" not in graph.required_by  # b's `w` extra: nobody asks for it
    assert [str(req) for _, req in graph.requirements["b"]] == ["b[x]"]


def test_markers_are_evaluated_for_the_host_in_the_graph():
    """An asked extra's requirement whose marker is false here, and a base requirement for
    Windows only, are no reason for a package to be there."""
    lines = extras_lines(
        dist("a", "1.0", "b[x]", "d; sys_platform == 'win32'"),
        dist("b", "1.0", "d; sys_platform == 'win32' and extra == 'x'"),
        dist("d", "2.0"),
        dist("e", "1.0", "d==1; extra == 'z'"),
    )
    assert lines == ["e 1.0 [z] requires d==1; 2.0 is installed"]


def test_the_seed_story_extra_beside_a_vllm_there_for_no_other_reason():
    """speculators [datagen] pins vllm==0.11.0 and vllm 0.16.0 is there for nothing else: in use,
    and failing. A distribution that requires vllm, or speculators' own base requirement on it,
    is another reason: no line."""
    spec = "vllm==0.11.0; extra == 'datagen'"
    assert extras_lines(dist("speculators", "0.3.0", spec), dist("vllm", "0.16.0")) == [
        "speculators 0.3.0 [datagen] requires vllm==0.11.0; 0.16.0 is installed"]
    assert extras_lines(dist("speculators", "0.3.0", spec), dist("vllm", "0.16.0"), dist("job", "1", "vllm")) == []
    assert extras_lines(dist("speculators", "0.3.0", "vllm", spec), dist("vllm", "0.16.0")) == []


def test_a_requirement_on_the_distribution_itself_is_no_sign_of_use():
    """sglang [dev] asks for sglang[test] and pins pytest; sglang is there for no other reason
    (the user installed it), which is no evidence the extra is in use: the pytest that job needs
    says nothing of it."""
    assert extras_lines(dist("sglang", "0.5.23", "sglang[test]; extra == 'dev'", "pytest==1; extra == 'dev'"),
                        dist("pytest", "9.0"), dist("job", "1", "pytest")) == []


def test_an_asked_extra_is_judged_even_when_another_of_its_packages_is_missing():
    """torch asks for cuda-toolkit[cublas,cufile]; nvidia-cufile is absent (pip check ignores extras,
    and so does this line) but the nvidia-cublas that is there must fit the extra's pin."""
    lines = extras_lines(
        dist("torch", "2.14.0", "cuda-toolkit[cublas,cufile]==13.0.3"),
        dist("cuda-toolkit", "13.0.3.0", "nvidia-cublas==13.0.*; extra == 'cublas'",
             "nvidia-cufile==1.15.*; extra == 'cufile'"),
        dist("nvidia-cublas", "13.1.0.3"),
    )
    assert lines == ["cuda-toolkit 13.0.3.0 [cublas] requires nvidia-cublas==13.0.*; 13.1.0.3 is installed"]
