"""The many-host view over real SSH: an sshd of our own on a loopback port (throwaway host and user
keys), an ssh_config with several aliases of 127.0.0.1 (each a "host" running another demo scenario),
one alias nobody answers on and one without gputui; ``gputui --hosts ... --json`` read through them.
"""

import getpass
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import ROOT, gputui, no_traceback

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.access("/usr/sbin/sshd", os.X_OK) else None)
SSH = shutil.which("ssh")
SSH_KEYGEN = shutil.which("ssh-keygen")

pytestmark = pytest.mark.skipif(
    not (SSHD and SSH and SSH_KEYGEN),
    reason="needs OpenSSH's sshd, ssh and ssh-keygen (Debian: apt-get install openssh-server)")

# alias -> the demo scenario its "host" runs
SCENARIOS = {"alpha": "training-node", "beta": "leaky", "gamma": "mig"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    """A running sshd and the ssh_config that reaches it; yields the ssh_config's path."""
    here = tmp_path_factory.mktemp("sshd")
    _keygen(here / "host_key")
    _keygen(here / "user_key")
    (here / "authorized_keys").write_text((here / "user_key.pub").read_text())
    port, closed = _free_port(), _free_port()
    (here / "sshd_config").write_text(f"""\
Port {port}
ListenAddress 127.0.0.1
HostKey {here / 'host_key'}
AuthorizedKeysFile {here / 'authorized_keys'}
PidFile {here / 'sshd.pid'}
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
""")
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    server = subprocess.Popen([SSHD, "-D", "-e", "-f", str(here / "sshd_config")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    common = f"""\
    HostName 127.0.0.1
    User {getpass.getuser()}
    IdentityFile {here / 'user_key'}
    IdentitiesOnly yes
    UserKnownHostsFile /dev/null
    StrictHostKeyChecking no
    LogLevel ERROR
"""
    (here / "ssh_config").write_text(
        f"Host alpha beta gamma nogputui\n    Port {port}\n{common}"
        f"Host down\n    Port {closed}\n    ConnectTimeout 5\n{common}")
    try:
        _wait_for_port(port, server)
        yield here / "ssh_config"
    finally:
        server.terminate()
        server.wait(timeout=10)


def _wait_for_port(port: int, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"sshd exited: {server.stderr.read() if server.stderr else ''}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    pytest.fail("sshd did not listen within 10 s")


def _config(tmp_path: Path) -> Path:
    """[hosts]: each alias runs this checkout's gputui with its own demo scenario."""
    remote = f"cd {ROOT} && {sys.executable} -m gputui"
    commands = "".join(f'{alias} = "{remote} --demo {scenario}"\n' for alias, scenario in SCENARIOS.items())
    path = tmp_path / "config.toml"
    # wait: how long --json waits for the hosts that have not answered. All of them answer within seconds;
    # the margin is for a loaded CI machine (one run saw nogputui's ssh still connecting at 30 s).
    path.write_text(f'[hosts]\ncommand = "{remote} --demo workstation"\nwait = 90\n'
                    f'[hosts.commands]\n{commands}nogputui = "gputui-is-not-installed-here"\n')
    return path


def test_hosts_json_over_real_ssh(sshd, tmp_path):
    env = {**os.environ, "GPUTUI_SSH": f"{SSH} -F {sshd}"}
    result = gputui(env, "--hosts", "alpha,beta,gamma,down,nogputui", "--json",
                    "--config", str(_config(tmp_path)))
    no_traceback(result)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["schema"], doc["version"]) == ("gputui.hosts", 1)
    hosts = {h["name"]: h for h in doc["hosts"]}
    assert list(hosts) == ["alpha", "beta", "gamma", "down", "nogputui"]  # the order asked for

    for alias, scenario in SCENARIOS.items():
        host = hosts[alias]
        assert (host["state"], host["reason"]) == ("live", None), host
        assert host["age"] is not None and 0 <= host["age"] < 30
        assert host["document"]["schema"] == "gputui.snapshot"
        assert host["document"]["snapshot"]["source"] == f"sim:{scenario}"

    alpha = hosts["alpha"]["document"]["snapshot"]
    assert len(alpha["devices"]) == 8 and alpha["host"]["hostname"] == "dgx-sim-01"
    assert {d["name"] for d in alpha["devices"]} == {"NVIDIA H100 80GB HBM3"}
    assert [r["pid"] for r in alpha["probes"]] == [48231]  # the probed training job's report came along
    beta = hosts["beta"]["document"]["snapshot"]
    assert len(beta["devices"]) == 1 and beta["devices"][0]["name"] == "NVIDIA A100-SXM4-40GB"
    gamma = hosts["gamma"]["document"]["snapshot"]
    assert any(d["mig_instances"] for d in gamma["devices"])

    down = hosts["down"]
    assert down["state"] == "unreachable" and down["document"] is None
    assert "Connection refused" in down["reason"]
    missing = hosts["nogputui"]
    assert (missing["state"], missing["reason"]) == (
        "unreachable", "no gputui on PATH: set its command in [hosts]")


def test_hosts_once_over_real_ssh(sshd, tmp_path):
    env = {**os.environ, "GPUTUI_SSH": f"{SSH} -F {sshd}", "COLUMNS": "100"}
    result = gputui(env, "--hosts", "beta,down", "--once", "--config", str(_config(tmp_path)))
    no_traceback(result)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("== beta · live · 1 GPU")
    assert "simulated: leaky" in lines[1]
    down = next(line for line in lines if line.startswith("== down"))
    assert "unreachable" in down and "Connection refused" in down
