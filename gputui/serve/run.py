"""``gputui serve``: check what was asked, listen, take a first sample, then serve until stopped.

Everything the user gave (address, users file, certificate, driver) is checked before the first
answer, and trouble with any of it is one line and exit status 2, as in every mode.
"""

from __future__ import annotations

import getpass
import signal
import sys
import threading

from prometheus_client import ProcessCollector
from prometheus_client.registry import CollectorRegistry

from gputui.alerts.alerting import alerting_for, to_stderr
from gputui.errors import UserError
from gputui.options import SERVE_INTERVAL, SERVE_LISTEN, Options
from gputui.sample.pipeline import open_pipeline
from gputui.serve.auth import Users, password_line
from gputui.serve.metrics import SampleCollector
from gputui.serve.sampling import Sampling
from gputui.serve.server import exposure_warnings, listen, parse_address, tls_context
from gputui.serve.web import make_app

NO_DRIVER_WARNING = ("gputui serve: warning: no NVIDIA driver (NVML could not be loaded): no GPU metrics; "
                     "serving the host's and the probed processes' metrics")


def serve(options: Options) -> int:
    """Serve /metrics and /snapshot until SIGINT or SIGTERM; ``--hash-password`` prints a users
    file's line instead."""
    asked = options.serve
    if asked.hash_password is not None:
        print(password_line(asked.hash_password, _read_password()))
        return 0
    address = parse_address(asked.listen or SERVE_LISTEN)
    users = Users.load(asked.basic_auth_file) if asked.basic_auth_file else None
    tls = tls_context(asked.tls_cert, asked.tls_key) if asked.tls_cert else None
    # SIGINT and SIGTERM (Ctrl-C, systemd, docker stop) are taken by sigwait() below, and by nothing
    # else: a handler raising wherever the main thread happens to be can land inside threading's own
    # locks (a Thread.start() of the sampler or of a request) and break them. Blocked before any
    # thread starts, so every thread inherits the mask; one that comes early waits for sigwait.
    stop_signals = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    try:
        server = listen(address, tls)  # before the first sample: a port in use is said at once
        try:
            pipeline = open_pipeline(options, lasting=True)  # no driver and no probe stops here, as it stops --json
            sampling = Sampling(pipeline, options.interval or SERVE_INTERVAL, alerting_for(options, to_stderr))
            try:
                sampling.take()
                server.set_app(make_app(lambda: sampling.latest, _registry(sampling), users))
                _say_where(server.url, server.loopback, users is not None, tls is not None, sampling.interval)
                if pipeline.unavailable is not None:  # probed CPU jobs kept it going: say what is missing
                    print(NO_DRIVER_WARNING, file=sys.stderr, flush=True)
                sampling.start()
                threading.Thread(target=server.serve_forever, name="gputui-serve", daemon=True).start()
                signum = signal.sigwait(stop_signals)
                server.shutdown()
                return 128 + signum  # 130 for Ctrl-C, 143 for SIGTERM, as a signal's default would say
            finally:
                sampling.stop()
        finally:
            server.server_close()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stop_signals)


def _registry(sampling: Sampling) -> CollectorRegistry:
    """gputui's families, and the exporter's own CPU and memory as every exporter reports them
    (process_cpu_seconds_total, process_resident_memory_bytes ...); none of the global registry's
    Python and garbage-collector metrics, which say nothing about the GPUs."""
    registry = CollectorRegistry()
    registry.register(SampleCollector(lambda: sampling.latest))
    ProcessCollector(registry=registry)
    return registry


def _say_where(url: str, loopback: bool, auth: bool, tls: bool, interval: float) -> None:
    print(f"gputui serve: {url}/metrics and /snapshot, a sample every {interval:g} s", file=sys.stderr, flush=True)
    for warning in exposure_warnings(loopback, auth, tls):
        print(f"gputui serve: warning: {warning}", file=sys.stderr, flush=True)


def _read_password() -> str:
    """From the terminal, asked twice without echo; else the first line of standard input."""
    if sys.stdin is not None and sys.stdin.isatty():
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            raise UserError("the two passwords differ")
        return password
    line = sys.stdin.readline() if sys.stdin is not None else ""
    return line.rstrip("\r\n")
