"""Bring-your-shapes TOML: parsing, strict validation, and the matrix it yields (CPU, fast)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from build_tools import userwheel
from build_tools.matrix import enumerate_variants
from build_tools.userconfig import ENV_VAR, ConfigError, from_env, load, main, parse
from kernels_py import all_specs
from kernels_py.spec import DEFAULT_ARCHS

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples" / "shapes").glob("*.toml"))


def _variants(text: str, archs=DEFAULT_ARCHS):
    config = parse(text, "test.toml")
    return enumerate_variants(all_specs(), config.archs or archs, config=config)


def _spec(op: str):
    return next(s for s in all_specs() if s.op == op)


def test_config_narrows_keys_and_replaces_specialisations():
    points = _variants(
        """
        [build]
        archs = ["sm_90a", "80"]
        [ops.rms_norm]
        dtype = ["bf16"]
        specs = [{N = 5120}, {N = 1536}, {N = 5120}]
        """
    )
    assert {p.spec.op for p in points} == {"rms_norm"}
    assert {p.key_string for p in points} == {"bf16"}
    # The generic variant is always there; the asked sizes replace the op's own (once each).
    assert [dict(p.specialisation) for p in points] == [{}, {"N": 5120}, {"N": 1536}]
    assert {p.archs for p in points} == {("sm_80", "sm_90a")}


@pytest.mark.parametrize(
    "table, words",
    [
        ("[ops.rms_norm]\nspecs = [{N = 132}]", "{N = 132} cannot be built for bf16"),
        (
            "[ops.topk_gate]\nspecs = [{E = 600}]",
            "a static E must be an expert count 1 <= E <= 512",
        ),
        ('[ops.swiglu]\ndtype = ["fp32"]\nspecs = [{H = 1410}]', "multiple of 4 for fp32"),
    ],
)
def test_sizes_the_kernel_cannot_specialise_are_refused_before_tracing(table, words):
    with pytest.raises(ConfigError, match=re.escape(words)):
        _variants(table)


def test_unlisted_fields_and_absent_specs_keep_the_ops_defaults():
    points = _variants('[build]\nops = ["per_token_cast_fp8"]')
    default = enumerate_variants([_spec("per_token_cast_fp8")], DEFAULT_ARCHS)
    assert [(p.name, p.archs) for p in points] == [(p.name, p.archs) for p in default]


def test_short_and_long_names_and_generic_only():
    long = _variants('[ops.moe_reduce]\nout_dtype = ["float32"]\nmode = ["sum"]')
    short = _variants('[ops.moe_reduce]\nout_dtype = ["fp32"]\nmode = ["sum"]')
    assert [p.name for p in long] == [p.name for p in short]
    assert long and all(p.key["out_dtype"] == "float32" and p.key["mode"] == "sum" for p in long)
    generic = _variants('[ops.swiglu]\ndtype = ["fp16"]\nspecs = []')
    assert [p.name for p in generic] == ["swiglu_fp16_any"]


def test_specialisations_of_several_sizes_and_unsupported_archs():
    points = _variants('[ops.gemm]\ndtype = ["bf16"]\nspecs = [{N = 5120, K = 2048}]')
    named = {p.name: p for p in points}
    assert set(named) == {"gemm_bf16_any", "gemm_bf16_n5120_k2048"}
    spec = _spec("gemm")
    for p in points:  # the op's own `supports` still decides the archs
        want = tuple(a for a in DEFAULT_ARCHS if spec.supports(a, p.key, p.specialisation))
        assert p.archs == want


@pytest.mark.parametrize(
    "text, message",
    [
        ('[ops.rms_nrm]\ndtype = ["bf16"]', "unknown op 'rms_nrm' (did you mean 'rms_norm'?)"),
        ('[ops.rms_norm]\ndtypes = ["bf16"]', "unknown key 'dtypes' (did you mean 'dtype'?)"),
        ('[ops.rms_norm]\ndtype = ["fp8"]', "dtype = 'fp8' is not built for rms_norm; allowed"),
        ("[ops.rms_norm]\ndtype = []", "[ops.rms_norm] dtype is empty"),
        ('[ops.rms_norm]\ndtype = "bf16"', "[ops.rms_norm] dtype must be a list of strings"),
        (
            "[ops.rms_norm]\nspecs = [{H = 4096}]",
            "{H = 4096} does not fit rms_norm; give {N = ...}",
        ),
        ("[ops.gemm]\nspecs = [{N = 4096}]", "give {K = ..., N = ...}"),
        ("[ops.rms_norm]\nspecs = [{N = 0}]", "N = 0 must be a positive integer"),
        ("[ops.rms_norm]\nspecs = [{N = true}]", "N = True must be a positive integer"),
        ("[ops.rms_norm]\nspecs = 4096", "specs must be a list of tables"),
        ("[ops.transpose]\nspecs = [{N = 64}]", "transpose has no specialised sizes"),
        ('[ops.cast_back_fp4]\ndtype = ["fp16"]', "allowed: bf16, fp32"),
        ('[build]\narchs = ["95"]\nops = ["gemm"]', "no tileaot target runs on '95'"),
        ('[build]\narchs = ["sm_95x"]\nops = ["gemm"]', "unknown arch 'sm_95x' in [build] archs"),
        ('[build]\nop = ["gemm"]', "unknown key 'op' at [build]; allowed: archs, ops"),
        ('[build]\nops = ["gemm"]\n[ops.rms_norm]', "'rms_norm' is not in [build] ops"),
        ('[build]\narchs = ["90a"]', "selects no ops"),
        ("version = 2", "unknown key 'version' at top level"),
        ("[ops.rms_norm", "not valid TOML"),
    ],
)
def test_errors_name_the_file_the_key_and_the_choices(text, message):
    with pytest.raises(ConfigError) as err:
        _variants(text)
    assert str(err.value).startswith("test.toml: ")
    assert message in str(err.value)


def test_values_that_no_key_combines():
    # Real ops have every combination of their key values; an op need not.
    keys = ({"dtype": "bfloat16", "mode": "sum"}, {"dtype": "float32", "mode": "max"})
    spec = dataclasses.replace(_spec("rms_norm"), op="toy", keys=keys)
    config = parse('[ops.toy]\ndtype = ["bf16"]\nmode = ["max"]', "test.toml")
    with pytest.raises(ConfigError, match="no key of toy combines these values; its keys are"):
        config.apply([spec])


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read build config"):
        load(tmp_path / "nope.toml")


def test_the_env_var_cmake_sets_reaches_the_matrix_through_from_env(tmp_path, monkeypatch):
    path = tmp_path / "m.toml"
    path.write_text('[ops.topk_gate]\nscoring = ["sigmoid"]\nspecs = [{E = 96}]')
    monkeypatch.setenv(ENV_VAR, str(path))
    names = [p.name for p in enumerate_variants(all_specs(), ("sm_90a",), config=from_env())]
    assert names == ["topk_gate_fp32_sigmoid_any", "topk_gate_fp32_sigmoid_e96"]
    # The matrix itself reads no environment (build_tools/matrix.py): the config is an argument.
    assert len(enumerate_variants(all_specs(), ("sm_90a",))) > len(names)
    monkeypatch.delenv(ENV_VAR)
    assert from_env() is None


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_are_valid_and_every_table_counts(path):
    config = load(path)
    points = enumerate_variants(all_specs(), config.archs or DEFAULT_ARCHS, config=config)
    assert {p.spec.op for p in points} == set(config.ops)
    for op, choice in config.ops.items():
        asked = [dict(s) for s in choice.specs or ()]
        built = [dict(p.specialisation) for p in points if p.spec.op == op]
        assert all(s in built for s in asked), (op, asked, built)


def test_cli_prints_what_cmake_reads(tmp_path, capsys):
    path = tmp_path / "m.toml"
    path.write_text('[build]\narchs = ["100a", "90a"]\nops = ["swiglu", "rms_norm"]')
    assert main([str(path), "--cmake"]) == 0
    assert capsys.readouterr().out.splitlines() == ["archs=90a,100a", "ops=swiglu,rms_norm"]
    path.write_text('[ops.swiglu]\ndtype = ["fp8"]')
    assert main([str(path), "--cmake"]) == 2
    assert "dtype = 'fp8' is not built for swiglu" in capsys.readouterr().err


def test_wheel_command_is_offline_and_keeps_configs_apart(tmp_path, capsys):
    path = tmp_path / "my_model.toml"
    path.write_text("[ops.rms_norm]\nspecs = [{N = 5120}]")
    cmd = userwheel.pip_command(str(path), None, ["-v"])
    assert cmd[1:5] == ["-m", "pip", "wheel", str(ROOT)]
    assert {"--no-build-isolation", "--no-index", "--no-deps", "-v"} <= set(cmd)
    assert f"-Ccmake.define.TILEAOT_CONFIG={path}" in cmd
    assert "-Cbuild-dir=build/config-my_model/{wheel_tag}" in cmd
    assert cmd[cmd.index("-w") + 1] == str(ROOT / "dist" / "my_model")
    path.write_text("[ops.rms_norm]\nspecs = [{M = 1}]")
    assert userwheel.pip_command(str(path), None, []) is None
    assert "{M = 1} does not fit rms_norm" in capsys.readouterr().err


def test_any_expert_count_is_a_topk_gate_specialisation_and_a_bad_one_fails_before_tracing():
    points = _variants('[ops.topk_gate]\nscoring = ["sigmoid"]\nspecs = [{E = 60}, {E = 384}]')
    assert [p.name for p in points] == [
        "topk_gate_fp32_sigmoid_any",
        "topk_gate_fp32_sigmoid_e60",
        "topk_gate_fp32_sigmoid_e384",
    ]
    with pytest.raises(ConfigError) as err:
        _variants("[ops.topk_gate]\nspecs = [{E = 1024}]")
    assert str(err.value) == (
        "test.toml: [ops.topk_gate] specs: {E = 1024} cannot be built for fp32,softmax: a static "
        "E must be an expert count 1 <= E <= 512; got 1024; remove it (the generic variant "
        "serves these sizes)"
    )
