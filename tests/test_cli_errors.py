"""Every CLI mistake is one `dra-webhook: ...` line on stderr and exit 2, never a traceback:
files that are not UTF-8, unusable certificate folders, addresses and ports that cannot be
listened on, out-of-range settings, unknown flags; and a fuzz over argv and file bytes. A
manifest `check` or `migrate` cannot use is one `check: ...` / `migrate: ...` line of its own."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.certs import mint
from app.cli import main

NOT_UTF8 = b"\xff\xfe kind: Pod\n"
EXAMPLES = Path(__file__).parent.parent / "examples" / "manifests.yaml"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's exit
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    return code, err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ("check", "--config", "{bad}", str(EXAMPLES)),
            "dra-webhook: policy file {bad}: not UTF-8",
        ),
        (("check", "{bad}"), "check: not judged: {bad}: not UTF-8 text (byte 0xff at offset 0)"),
        (("report", "{bad}"), "dra-webhook: {bad}: not UTF-8 text"),
        (("check", "--cluster-file", "{bad}", str(EXAMPLES)), "dra-webhook: cluster file {bad}: "),
        (("migrate", "--cluster-file", "{bad}", str(EXAMPLES)), "dra-webhook: cluster file {bad}"),
        (("migrate", "--templates-out", "{bad}", str(EXAMPLES)), "dra-webhook: --templates-out "),
        (("serve", "--config", "{bad}"), "dra-webhook: policy file {bad}: not UTF-8 text"),
    ],
)
def test_a_file_that_is_not_utf8_is_one_line_naming_it(
    argv: tuple[str, ...], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(NOT_UTF8)
    code, err = run(capsys, *(a.replace("{bad}", str(bad)) for a in argv))
    assert code == 2
    assert one_line(err).startswith(said.replace("{bad}", str(bad)))


def test_a_cert_folder_holding_only_tls_crt_is_refused_not_overwritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mint(tmp_path / "pair")
    half = tmp_path / "half"
    half.mkdir()
    crt = (tmp_path / "pair" / "tls.crt").read_bytes()
    (half / "tls.crt").write_bytes(crt)
    code, err = run(capsys, "serve", "--cert-dir", str(half))
    assert code == 2
    assert "holds tls.crt but no tls.key" in one_line(err)
    assert (half / "tls.crt").read_bytes() == crt and not (half / "tls.key").exists()


@pytest.mark.parametrize("broken", ["garbage", "mismatched"])
def test_a_cert_pair_the_tls_library_refuses_is_one_line(
    broken: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "certs"
    if broken == "garbage":
        folder.mkdir()
        (folder / "tls.crt").write_text("garbage\n")
        (folder / "tls.key").write_text("garbage\n")
    else:
        mint(folder)
        mint(tmp_path / "other")
        (folder / "tls.key").write_bytes((tmp_path / "other" / "tls.key").read_bytes())
    code, err = run(capsys, "serve", "--cert-dir", str(folder))
    assert code == 2
    assert "tls.crt and tls.key are not a usable pair" in one_line(err)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (("serve", "--host", "256.1.1.1"), "--host 256.1.1.1: not an address to listen on"),
        (("serve", "--workers", "0"), "invalid setting: --workers 0: "),
        (("serve", "--port", "99999"), "invalid setting: --port 99999: "),
        (("serve", "--health-port", "-1"), "invalid setting: --health-port -1: "),
        (
            ("serve", "--port", "9443", "--health-port", "9443"),
            "--health-port 9443: the same port as --port",
        ),
        (("check", "--frobnicate", "x.yaml"), "dra-webhook check: unrecognized arguments"),
        (("check",), "dra-webhook check: the following arguments are required: manifests"),
        (("frobnicate",), "dra-webhook: argument command: invalid choice"),
    ],
)
def test_settings_and_flags_are_one_line(
    argv: tuple[str, ...], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run(capsys, *argv)
    assert code == 2
    assert said in one_line(err)


@pytest.mark.parametrize("flag", ["--port", "--health-port"])
def test_a_port_in_use_is_one_line_naming_its_flag(
    flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        ports = {"--port": "0", "--health-port": "0", flag: str(port)}
        argv = ["serve", "--host", "127.0.0.1", *(a for kv in ports.items() for a in kv)]
        code, err = run(capsys, *argv, "--cert-dir", str(tmp_path / "certs"))
    assert code == 2
    assert one_line(err) == (
        f"dra-webhook: {flag} {port}: 127.0.0.1:{port} is already in use (another dra-webhook?)"
    )
    assert not (tmp_path / "certs").exists()  # nothing minted for a server that cannot start


@pytest.mark.parametrize(
    ("policy", "said"),
    [
        (NOT_UTF8, "policy file {bad}: not UTF-8 text"),
        (b"namespaceModes: {lable: x}\n", "unknown key `lable` under `namespaceModes`"),
    ],
)
def test_a_bad_policy_is_said_before_a_busy_port(
    policy: bytes, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(policy)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = str(held.getsockname()[1])
        code, err = run(
            capsys, "serve", "--host", "127.0.0.1", "--port", port, "--config", str(bad)
        )
    assert code == 2
    assert said.replace("{bad}", str(bad)) in one_line(err)


SUBCOMMANDS = ["check", "report", "migrate", "certs"]
"""`serve` is left out of the fuzz: a valid one would serve (its mistakes are tested above)."""
TOKENS = st.sampled_from(
    [
        "--config",
        "--cluster-file",
        "--output",
        "json",
        "text",
        "--namespace",
        "ns",
        "--write",
        "--diff",
        "--templates-out",
        "--kubeconfig",
        "--fail",
        "--out",
        "--dns",
        "-",
        "--",
        "{file}",
        "{missing}",
        "{folder}",
    ]
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    command=st.sampled_from(SUBCOMMANDS),
    tokens=st.lists(TOKENS, max_size=5),
    content=st.binary(max_size=200)
    | st.sampled_from(
        [b"kind: Pod\n", b"- a\n- b\n", b"{", b"items: 3\n", b"kind: List\nitems: [1]\n"]
    ),
)
def test_the_cli_never_answers_with_a_traceback(
    command: str,
    tokens: list[str],
    content: bytes,
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Exit 0, 1 or 2; on exit 2 a single line (check and migrate: one line per file or object
    they could not judge or translate, each naming it); never an exception out of main."""
    folder = tmp_path_factory.mktemp("fuzz")
    file = folder / "input.yaml"
    file.write_bytes(content)
    argv = [command] + [
        t.format(file=file, missing=folder / "missing.yaml", folder=folder) for t in tokens
    ]
    if command == "certs" and "--out" not in argv:
        argv += ["--out", str(folder / "certs")]
    if command == "report" and "--kubeconfig" in argv:
        return  # would reach for a cluster; its errors are tested in tests/report
    code, err = run(capsys, *argv)
    assert code in (0, 1, 2), (argv, err)
    assert "Traceback" not in err
    if code == 2 and command in ("migrate", "check"):
        lines = err.strip().splitlines()
        assert lines and all(line.startswith((f"{command}: ", "dra-webhook")) for line in lines), (
            err
        )
    elif code == 2:
        one_line(err)


def test_the_console_script_exits_2_with_one_line_for_a_mistake() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "app", "check", "--frobnicate", "x.yaml"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "dra-webhook check: unrecognized arguments: --frobnicate (see `dra-webhook check --help`)"
    ]


@pytest.mark.parametrize("command", ["serve", "certs", "check", "report", "migrate"])
def test_each_command_s_help_ends_with_examples(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "\nexamples:\n" in out
    assert f"  dra-webhook {command} " in out
