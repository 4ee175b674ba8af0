"""The first hour's command-line mistakes: each gets one line on stderr that names the input
and the fix, exit status 2, and no traceback (issue 20's list, plus their neighbours).

The commands run in-process (`main(argv)`), so an uncaught exception fails the test.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from test_check import write_manifest

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "examples" / "models" / "llama-3-8b.json"
_tileaot_main = importlib.import_module("tileaot.__main__")


def _build_tools_main():
    pytest.importorskip("kernels_py")
    return importlib.import_module("build_tools.__main__").main


@pytest.fixture
def files(tmp_path):
    (tmp_path / "not_json.json").write_text("[ops.rms_norm]\nspecs = [{N = 4096}]\n")
    (tmp_path / "broken.toml").write_text("hidden_size = \n")
    (tmp_path / "binary.json").write_bytes(b"\x80\x81\x82\xff")
    (tmp_path / "e1000.toml").write_text("[ops.topk_gate]\nspecs = [{E = 1000}]\n")
    (tmp_path / "n2884.toml").write_text('[ops.rms_norm]\ndtype = ["bf16"]\nspecs = [{N = 2884}]\n')
    (tmp_path / "model_dir").mkdir()
    (tmp_path / "model_dir" / "config.json").write_text(LLAMA.read_text())
    return tmp_path


def _check_cmd(*argv):
    return ("tileaot", ["check", *argv])


# (command, argv with {d} = the tmp folder, words the one line must contain)
MISTAKES = [
    # ("90" is a spelling of sm_90a now: tests/test_arch_table.py)
    (("build_tools", ["list", "--archs", "91a"]), ["'91a'", "--archs", "sm_90a"]),
    (("build_tools", ["generate", "--out", "{d}/g", "--archs", "91a"]), ["'91a'", "--archs"]),
    (("build_tools", ["config", "{d}/missing.toml"]), ["missing.toml", "cannot read"]),
    (
        ("build_tools", ["config", str(LLAMA)]),
        ["llama-3-8b.json", "not valid TOML", "tileaot check"],
    ),
    (
        ("build_tools", ["config", "{d}/e1000.toml"]),
        ["e1000.toml", "{E = 1000}", "1 <= E <= 512", "remove it"],
    ),
    (("build_tools", ["config", "{d}/n2884.toml"]), ["{N = 2884}", "multiple of 8 (16 bytes)"]),
    (("build_tools", ["list", "--config", "{d}/e1000.toml"]), ["e1000.toml", "1 <= E <= 512"]),
    (("build_tools", ["wheel", "--config", "{d}/missing.toml"]), ["missing.toml", "cannot read"]),
    (("build_tools", ["wheel", "--config", "{d}/n2884.toml"]), ["n2884.toml", "got 2884"]),
    (_check_cmd(str(LLAMA), "--save-config", "{d}/nowhere/x.toml"), ["nowhere", "does not exist"]),
    (_check_cmd(str(LLAMA), "--save-config", "{d}"), ["is a folder", "give a file name"]),
    (_check_cmd("{d}/not_json.json"), ["not_json.json", "not valid JSON", "TOML"]),
    (_check_cmd("{d}/broken.toml"), ["broken.toml", "not valid TOML"]),
    (_check_cmd("{d}/binary.json"), ["binary.json", "not a text file"]),
    (_check_cmd("{d}/model_dir"), ["model_dir is a folder", "config.json"]),
    (_check_cmd("{d}/none.json"), ["no model config at", "none.json"]),
    (_check_cmd(str(LLAMA), "--tokens", "0"), ["--tokens 0", "positive integer"]),
    (_check_cmd(str(LLAMA), "--arch", "Voodoo"), ["unknown GPU arch 'Voodoo'"]),
]


@pytest.mark.parametrize("command, words", MISTAKES, ids=[" ".join(m[0][1][:2]) for m in MISTAKES])
def test_one_line_naming_the_input(command, words, files, capsys):
    tool, argv = command
    argv = [a.replace("{d}", str(files)) for a in argv]
    if tool == "tileaot":
        manifest = str(write_manifest(files / "manifest.json"))
        status = _tileaot_main.main([*argv, "--manifest", manifest])
    else:
        status = _build_tools_main()(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert status == 2, (status, err)
    assert len(lines) == 1, err  # printed once
    assert "Traceback" not in err and "tilelang" not in err  # no wrong install hint
    for word in words:
        assert word.replace("{d}", str(files)) in lines[0], (word, lines[0])
    if "--save-config" in argv:
        assert out == ""  # refused before any work: nothing half-done


def test_a_missing_manifest_is_one_line(tmp_path, capsys):
    argv = ["check", str(LLAMA), "--arch", "H200", "--manifest", str(tmp_path / "m.json")]
    status = _tileaot_main.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and "no tileaot manifest" in err[0]
