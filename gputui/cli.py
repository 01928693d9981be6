"""Command line: parse arguments, read the config file once (the modes that use it), and hand over to
one mode (tui, once, json, watch, run, attach ...).

Each mode's module is imported only when chosen, so ``gputui --once`` never loads Textual and no
mode of the monitor ever loads torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn

from gputui import __version__, units
from gputui.errors import UserError
from gputui.model.alert import WEBHOOK_FORMATS
from gputui.model.estimate import OPTIMIZER_CHOICES, PRECISIONS
from gputui.options import (
    SCENARIOS,
    SERVE_INTERVAL,
    SERVE_LISTEN,
    THEMES,
    WEB_IDLE,
    WEB_LISTEN,
    WEB_SESSIONS,
    DemoTrainOptions,
    EstimateOptions,
    Mode,
    Options,
    RecordOptions,
    ReplayOptions,
    ServeOptions,
    WebOptions,
)

if TYPE_CHECKING:
    from gputui.config import Config

_invalid = argparse.ArgumentTypeError  # an option's bad value: argparse says which option, then why


def _seconds(text: str) -> float:
    """An interval in seconds, checked by the same rule as the config file's ``interval``."""
    from gputui.config import interval_problem

    try:
        value = float(text)
    except ValueError:
        raise _invalid(f"not a number: {text!r}") from None
    problem = interval_problem(value)
    if problem:
        raise _invalid(problem)
    return value


def _one_of(choices: Sequence[str]) -> Callable[[str], str]:
    """An argparse type: one of ``choices``, or the same line on every Python (argparse's own line quotes
    the choices in some versions and not in others: CPython gh-117766, gh-144983)."""
    def one_of(text: str) -> str:
        if text not in choices:
            raise _invalid(f"invalid choice: {text!r} (choose from {', '.join(choices)})")
        return text

    return one_of


def _pid(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise _invalid(f"not a process id: {text!r}") from None
    if value <= 0:
        raise _invalid(f"not a process id: {text!r}")
    return value


def _count(one: str, many: str, hint: str = "") -> Callable[[str], int]:
    """An argparse type: a whole number of things, 1 or more (``hint`` said when it is less)."""
    def count(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise _invalid(f"not a whole number of {many}: {text!r}") from None
        if value < 1:
            raise _invalid(f"at least 1 {one}, not {text!r}{hint}")
        return value

    return count


def _size(text: str) -> int:
    try:
        return units.parse_size(text)
    except ValueError as exc:
        raise _invalid(str(exc)) from None


def _pid_list(text: str) -> tuple[int, ...]:
    return tuple(_pid(part) for part in text.split(",") if part.strip())


def _name_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


COMMANDS = ("run", "attach", "detach", "probes", "probe", "demo-train", "serve", "web", "estimate", "oom", "record",
            "replay")
DEFAULT_SCENARIO = "workstation"  # a bare --demo


class Parser(argparse.ArgumentParser):
    """argparse that answers a mistake as git and cargo do: the line that says what is wrong, then where
    to read more (not a screen of usage above it); and a useful word for a stray argument instead of
    "invalid choice: '1'"."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands: dict[str, argparse.ArgumentParser] = {}  # the subcommands' parsers (build_parser)

    def error(self, message: str) -> NoReturn:
        stray = re.match(r"argument COMMAND: invalid choice: '?([^' ]*)'?", message)
        if stray:
            word = stray.group(1)
            if re.fullmatch(r"\d+(\.\d*)?", word):
                message = (f"unexpected {word!r}: for seconds between samples use --interval {word} "
                           f"(live monitor) or --watch {word} (printing); for GPUs, --only {word}")
            else:
                message = f"{word!r} is not a command (commands: {', '.join(COMMANDS)})"
        self.exit(2, f"{self.prog}: error: {message}\nsee '{self.prog} --help'\n")


class Joined(argparse.Action):
    """Values given space-separated (nvitop, gpustat) or comma-separated, as one tuple."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        assert isinstance(values, list)  # nargs="+": a list of the tuples _name_list or _pid_list made
        items = tuple(item for value in values for item in value)
        command = next((item for item in items if item in COMMANDS), None)
        if command is not None:  # `--only 0 run -- ...`: the list swallowed the command
            parser.error(f"{option_string} {' '.join(items)}: {command!r} is a command, not a GPU; "
                         f"before a command, write the list with commas ({option_string} 0,1)")
        setattr(namespace, self.dest, items)


def build_parser() -> Parser:
    parser = Parser(
        prog="gputui",
        description="Terminal monitor for NVIDIA GPUs, with a PyTorch memory probe.",
        epilog="Without a GPU, try: gputui --demo",
    )
    parser.add_argument("--version", action="version", version=f"gputui {__version__}")
    shown = parser.add_argument_group("what to show")
    shown.add_argument("-1", "--once", action="store_true",
                       help="print one snapshot and exit")
    shown.add_argument("--json", action="store_true", help="print the snapshot as JSON and exit")
    shown.add_argument(
        "--watch", nargs="?", const=2.0, type=_seconds, metavar="SECONDS",
        help="print a snapshot every SECONDS (default 2) until interrupted",
    )
    shown.add_argument("--interval", type=_seconds, metavar="SECONDS",
                       help="seconds between samples in the live monitor (default 1)")
    source = parser.add_argument_group("where the data comes from")
    source.add_argument(
        "--demo", nargs="?", const=DEFAULT_SCENARIO, type=_one_of(SCENARIOS), metavar="SCENARIO",
        help=f"use simulated GPUs instead of the driver: {', '.join(SCENARIOS)} (default workstation)",
    )
    source.add_argument(
        "--hosts", nargs="?", const=(), type=_name_list, metavar="HOSTS",
        help="watch several machines over ssh (each runs gputui --json --watch) or `gputui serve` URLs: "
             "--hosts node1,node2,http://node3:9403; bare --hosts: the config's [hosts] names",
    )
    source.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    source.add_argument("--demo-processes", type=_count("process", "processes"), metavar="N", help=argparse.SUPPRESS)
    filters = parser.add_argument_group("filters")
    filters.add_argument("--only", type=_name_list, default=(), metavar="GPUS", nargs="+",
                         action=Joined,
                         help="only these GPUs: NVML indices or UUIDs (--only 0,2 or --only 0 2)")
    filters.add_argument("--only-visible", action="store_true",
                         help="only the GPUs CUDA_VISIBLE_DEVICES exposes")
    filters.add_argument("--user", type=_name_list, default=(), metavar="USERS", nargs="?",
                         const=None, help="only processes of these users (default: you)")
    filters.add_argument("--pid", type=_pid_list, default=(), metavar="PIDS", nargs="+",
                         action=Joined, help="only these processes (--pid 1,2 or --pid 1 2)")
    look = parser.add_argument_group("looks and safety")
    look.add_argument("--ascii", action="store_true", help="no box-drawing or braille characters")
    look.add_argument("--no-color", action="store_true", help="no colour (also: NO_COLOR=1)")
    look.add_argument("--readonly", action="store_true", help="disable sending signals")
    look.add_argument("--theme", type=_one_of(THEMES), choices=THEMES, help="colour theme of the live monitor")
    look.add_argument("--config", metavar="PATH", help="config file (default: XDG config dir)")

    _add_alert_options(parser.add_argument_group("alerts (the monitor, --watch, serve, record)"))
    _add_idle_options(parser.add_argument_group("who holds GPUs idle (the w view, --once, --json, serve)"))

    sub = parser.add_subparsers(dest="subcommand", metavar="COMMAND")
    run = sub.add_parser("run", help="run a command with the PyTorch probe inside it")
    run.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")
    attach = sub.add_parser("attach", help="start the probe inside a running Python process (3.10+)")
    attach.add_argument("target", type=_pid, metavar="PID")
    detach = sub.add_parser("detach", help="stop the probe inside a running process; the job runs on")
    detach.add_argument("target", type=_pid, metavar="PID")
    sub.add_parser("probes", help="list the probed processes you can reach").add_argument(
        "--json", action="store_true", dest="sub_json", help="as JSON")
    probe = sub.add_parser("probe", help="print one probed process's memory report")
    probe.add_argument("target", type=_pid, metavar="PID")
    probe.add_argument("--json", action="store_true", dest="sub_json", help="as JSON")
    oom = sub.add_parser("oom", help="print the report a probed job left when it ran out of memory")
    oom.add_argument("file", nargs="?", metavar="FILE", help="the report (default: your latest)")
    oom.add_argument("--json", action="store_true", dest="sub_json", help="as JSON")
    _add_record_commands(sub)
    demo_train = sub.add_parser("demo-train", help="a small PyTorch training loop with the probe")
    until = "; leave --steps out to train until interrupted"
    demo_train.add_argument("--steps", type=_count("step", "steps", until), default=None, metavar="N",
                            help="stop after N steps (default: train until interrupted)")
    demo_train.add_argument(
        "--leak", nargs="?", const="graph", type=_one_of(("graph", "outputs", "cache")), metavar="KIND",
        help="add a classic leak: graph (total_loss += loss, the default), outputs (kept with their "
             "graph) or cache (a growing dict of tensors)",
    )
    estimate = sub.add_parser("estimate", help="will a training job fit? one step measured without real memory")
    estimate.add_argument("job", metavar="SCRIPT:FUNCTION",
                          help="FUNCTION in SCRIPT returns (model, batch[, optimizer[, loss]]): see README")
    estimate.add_argument("--batch-size", type=_count("sample", "samples"), metavar="N",
                          help="call FUNCTION(batch_size=N) (default: FUNCTION's own batch)")
    estimate.add_argument("--optimizer", type=_one_of(OPTIMIZER_CHOICES), choices=OPTIMIZER_CHOICES,
                          help="step this optimizer (default: FUNCTION's, else adam); sgd has momentum")
    estimate.add_argument("--precision", type=_one_of(PRECISIONS), choices=PRECISIONS, default="fp32",
                          help="cast the model and batch (bf16, fp16) or run the forward under autocast (amp)")
    estimate.add_argument("--checkpointing", action="store_true",
                          help="checkpoint the activations of the model's blocks")
    estimate.add_argument("--max-batch", action="store_true",
                          help="the largest batch size that fits the device, for the job and each what-if")
    estimate.add_argument("--zero-gpus", type=_count("GPU", "GPUs"), default=8, metavar="N",
                          help="the what-ifs of sharding over N GPUs (default 8): ZeRO-2, and FSDP2 with --fsdp2")
    estimate.add_argument("--fsdp2", action="store_true",
                          help="also measure one rank of FSDP2 over the --zero-gpus N GPUs (several times slower)")
    estimate.add_argument("--no-what-if", action="store_true", help="leave out the what-if table (faster)")
    capacity = estimate.add_mutually_exclusive_group()
    capacity.add_argument("--device-memory", type=_size, metavar="SIZE",
                          help="the device's total memory: 16GiB, 80G, 24000MiB, 16GB (10^9)")
    capacity.add_argument("--gpu", type=int, metavar="INDEX", help="the total memory of this GPU here")
    estimate.add_argument("--json", action="store_true", dest="sub_json", help="as JSON")
    serve = sub.add_parser("serve", help="a Prometheus exporter: /metrics, and /snapshot (the --json document)")
    _add_alert_options(serve, argparse.SUPPRESS)
    _add_idle_options(serve, argparse.SUPPRESS)
    serve.add_argument("--listen", metavar="ADDR:PORT",
                       help=f"where to listen (default {SERVE_LISTEN}: this machine only; 0.0.0.0:PORT for "
                            "every network, with a warning unless --basic-auth-file is given)")
    serve.add_argument("--interval", type=_seconds, dest="serve_interval", metavar="SECONDS",
                       help=f"seconds between samples (default {SERVE_INTERVAL:g}); scrapes get the last one")
    serve.add_argument("--basic-auth-file", metavar="PATH",
                       help="ask for a user name and password from this file (lines from --hash-password)")
    serve.add_argument("--tls-cert", metavar="PATH", help="serve HTTPS with this certificate (PEM; with its "
                       "private key unless --tls-key)")
    serve.add_argument("--tls-key", metavar="PATH", help="the certificate's private key (PEM)")
    serve.add_argument("--hash-password", metavar="NAME",
                       help="read a password (terminal or standard input), print NAME:HASH for "
                            "--basic-auth-file, and exit")
    _add_web_options(sub.add_parser("web", help="the live monitor in a browser, read-only (needs gputui[web])"))
    # Each command's parser, for the mistakes parse() finds once argparse is done: see 'gputui run --help'.
    parser.commands = dict(sub.choices)
    return parser


def _add_alert_options(group: Any, default: Any = None) -> None:
    """The --alert-* flags: on the main parser, and on serve and record, where they are given after the
    command (``default`` SUPPRESS there, so they do not undo the main parser's)."""
    group.add_argument("--alert-command", metavar="CMD", default=default,
                       help="run CMD for each alert delivery: the alerts as JSON on stdin, GPUTUI_ALERT_* set")
    group.add_argument("--alert-webhook", metavar="URL", default=default, help="POST each alert delivery to URL")
    group.add_argument("--alert-webhook-format", type=_one_of(WEBHOOK_FORMATS), choices=WEBHOOK_FORMATS,
                       default=default,
                       help="the webhook's body (default json)")
    group.add_argument("--alert-oom-within", type=_duration, metavar="D", default=default,
                       help="alert when memory runs out within D (default 30m)")
    group.add_argument("--alert-idle-after", type=_duration, metavar="D", default=default,
                       help="alert when a GPU holds memory idle for D (default 1h)")
    group.add_argument("--alert-free-after", type=_duration, metavar="D", default=default,
                       help="alert when a busy GPU has been free for D (default 1m)")
    group.add_argument("--alert-kinds", metavar="KINDS", default=default,
                       help="only these kinds, comma-separated (leak,oom_soon,oom_ended,gpu_lost,gpu_errors,"
                            "gpu_idle,gpu_free,straggler,imbalance)")
    group.add_argument("--no-alerts", action="store_true", default=default if default is not None else False,
                       help="raise no alerts")


ALERT_FLAGS = ("command", "webhook", "webhook_format", "oom_within", "idle_after", "free_after", "kinds")


def _alert_flags(args: argparse.Namespace) -> tuple[tuple[str, object], ...]:
    given = [(key, getattr(args, f"alert_{key}", None)) for key in ALERT_FLAGS]
    if getattr(args, "no_alerts", False):
        given.append(("enabled", False))
    return tuple((key, value) for key, value in given if value is not None)


def _add_idle_options(group: Any, default: Any = None) -> None:
    """The flags over the config's [waste]: their words are checked with the config's values, in one place
    (gputui.analysis.waste_rules)."""
    group.add_argument("--idle-memory", metavar="SIZE", default=default,
                       help="a GPU an owner holds SIZE of or more (default 1GiB) ...")
    group.add_argument("--idle-util", metavar="PERCENT", default=default,
                       help="... at under PERCENT SM utilisation (default 5) ...")
    group.add_argument("--idle-after", metavar="D", default=default,
                       help="... for D without a break (default 10m) is held idle")
    group.add_argument("--waste-window", metavar="D", default=default,
                       help="the owners' mean SM utilisation is over the last D (default 10m)")


IDLE_FLAGS = ("idle_memory", "idle_util", "idle_after", "waste_window")


def _idle_flags(args: argparse.Namespace) -> tuple[tuple[str, object], ...]:
    given = ((key, getattr(args, key, None)) for key in IDLE_FLAGS)
    return tuple(("window" if key == "waste_window" else key, value) for key, value in given if value is not None)


def _duration(text: str) -> float:
    value = units.parse_duration(text)
    if value is None or value <= 0:
        raise _invalid(f"not a duration: {text!r} (e.g. 90s, 30m, 2h)")
    return value


def _add_record_commands(sub: Any) -> None:
    record = sub.add_parser("record", help="record what the monitor sees to FILE, for gputui replay")
    record.add_argument("file", metavar="FILE")
    _add_alert_options(record, argparse.SUPPRESS)
    _add_idle_options(record, argparse.SUPPRESS)
    record.add_argument("--interval", type=_seconds, dest="record_interval", metavar="SECONDS",
                        help="seconds between samples (default 1)")
    record.add_argument("--duration", type=_duration, metavar="D", help="stop after D (90s, 30m, 2h)")
    record.add_argument("--max-size", type=_size, metavar="SIZE",
                        help="rotate FILE to FILE.1 (3 kept) at this size (default 200M)")
    replay = sub.add_parser("replay", help="the live monitor on a recording, with time travel")
    replay.add_argument("file", metavar="FILE")
    replay.add_argument("--once", action="store_true", dest="sub_once", help="print one sample and exit")
    replay.add_argument("--json", action="store_true", dest="sub_json", help="print one sample as JSON and exit")
    replay.add_argument("--at", metavar="TIME",
                        help="the sample --once/--json print: 90s or 5m from the start, 12:34:56, or an "
                             "ISO time, within the recording (default: the last)")
    replay.add_argument("--web", action="store_true", help="show it in a browser, as gputui web does, with its flags")
    _add_web_options(replay)


def _add_web_options(parser: argparse.ArgumentParser) -> None:
    """The browser view's flags, on ``web`` and on ``replay`` (with --web); the exporter's words for those it
    shares with ``serve``. Defaults None: web_options fills them in, once it knows they were not given."""
    parser.add_argument("--listen", metavar="ADDR:PORT",
                        help=f"where to listen (default {WEB_LISTEN}: this machine only; 0.0.0.0:PORT for every "
                             "network, with a warning unless --basic-auth-file is given)")
    parser.add_argument("--basic-auth-file", metavar="PATH",
                        help="ask for a user name and password from this file (lines from gputui serve "
                             "--hash-password)")
    parser.add_argument("--tls-cert", metavar="PATH", help="serve HTTPS with this certificate (PEM; with its "
                        "private key unless --tls-key)")
    parser.add_argument("--tls-key", metavar="PATH", help="the certificate's private key (PEM)")
    parser.add_argument("--max-sessions", type=_count("session", "sessions"), metavar="N",
                        help=f"browser sessions at once, a monitor process each (default {WEB_SESSIONS})")
    parser.add_argument("--session-timeout", type=_duration, metavar="D",
                        help=f"close a session after D without a key, a click or a resize (default "
                             f"{WEB_IDLE / 60:g}m)")
    parser.add_argument("--web-session", action="store_true", help=argparse.SUPPRESS)  # gputui web's own


WEB_FLAGS = ("listen", "basic_auth_file", "tls_cert", "tls_key", "max_sessions", "session_timeout")


def _web_options(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: Sequence[str]) -> WebOptions:
    """The browser view's flags as given (``argv``: the whole command line, which each session runs again)."""
    _tls_key_with_cert(parser, args)
    return WebOptions(listen=args.listen, basic_auth_file=args.basic_auth_file, tls_cert=args.tls_cert,
                      tls_key=args.tls_key, sessions=args.max_sessions or WEB_SESSIONS,
                      idle=args.session_timeout or WEB_IDLE, argv=tuple(argv), session=args.web_session)


def _tls_key_with_cert(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.tls_key and not args.tls_cert:
        parser.error("--tls-key goes with --tls-cert")


def _bare_demo_before_a_command(argv: list[str]) -> list[str]:
    """``gputui --demo serve`` means the default scenario, then the command: argparse would take the
    command's name as --demo's scenario and refuse it."""
    argv = list(argv)
    for i, word in enumerate(argv[:-1]):
        if word in COMMANDS or word == "--":
            break  # a command's own arguments (run -- CMD ...) are not ours to read
        if word == "--demo" and argv[i + 1] in COMMANDS:
            argv[i] = f"--demo={DEFAULT_SCENARIO}"
    return argv


SECONDS_OPTIONS = ("--watch", "--interval")


def _negative_seconds_kept(argv: list[str]) -> list[str]:
    """``--watch -1`` as ``--watch=-1``: argparse takes a word that looks like a negative number for an
    option here (-1 is --once), so a sign slip would read as "--watch --once" or an unknown -2, where
    it deserves the interval's own message. A command's own words (after ``run`` or ``--``) are left
    alone."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        word, following = argv[i], argv[i + 1] if i + 1 < len(argv) else ""
        if word in ("run", "--"):
            return out + argv[i:]
        if word in SECONDS_OPTIONS and following.startswith("-") and _is_number(following):
            out.append(f"{word}={following}")
            i += 2
        else:
            out.append(word)
            i += 1
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def parse(argv: list[str] | None = None) -> Options:
    """Parse ``argv`` (argparse exits with 2 on bad arguments)."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(_negative_seconds_kept(_bare_demo_before_a_command(argv)))
    if args.subcommand == "web" and (args.once or args.json or args.watch is not None):
        parser.error("gputui web shows the live monitor in a browser; --once, --json and --watch print it here")
    exclusive = [name for name in ("once", "json") if getattr(args, name)]
    if len(exclusive) > 1 and args.watch is None:
        parser.error("--once and --json cannot be combined (use --json alone)")
    if args.once and args.watch is not None:
        parser.error("--once and --watch cannot be combined (--watch prints until interrupted)")
    if args.hosts is not None:
        _check_hosts(parser, args)
    users = args.user
    if users is None:  # bare --user means "mine"
        users = (_current_user(),)
    color = False if (args.no_color or os.environ.get("NO_COLOR")) else None

    common = dict(
        demo=args.demo, seed=args.seed, demo_processes=args.demo_processes,
        interval=args.interval, only=args.only, only_visible=args.only_visible,
        users=users, pids=args.pid, ascii=args.ascii, color=color, readonly=args.readonly,
        theme=args.theme, config=args.config, json=args.json, hosts=args.hosts, alert_flags=_alert_flags(args),
        idle_flags=_idle_flags(args),
    )
    if args.subcommand == "run":
        command = list(args.argv)
        if command and command[0] == "--":
            command = command[1:]
        if not command:
            parser.commands["run"].error("give the command to run, e.g. gputui run -- python train.py")
        return Options(mode="run", command=tuple(command), **common)
    if args.subcommand in ("attach", "detach"):
        return Options(mode=args.subcommand, pid=args.target, **common)
    if args.subcommand == "probes":
        return Options(mode="probes", **{**common, "json": args.sub_json or args.json})
    if args.subcommand == "probe":
        return Options(mode="probe", pid=args.target, **{**common, "json": args.sub_json or args.json})
    if args.subcommand == "oom":
        return Options(mode="oom", file=args.file, **{**common, "json": args.sub_json or args.json})
    if args.subcommand == "record":
        interval = args.interval if args.record_interval is None else args.record_interval
        record = RecordOptions(file=args.file, duration=args.duration, max_size=args.max_size)
        return Options(mode="record", record=record, **{**common, "interval": interval})
    if args.subcommand == "replay":
        printing = args.sub_once or args.sub_json or args.once or args.json
        if args.at is not None and not printing:
            parser.commands["replay"].error("--at goes with --once or --json (in the monitor, seek with its keys)")
        replay = ReplayOptions(file=args.file, at=args.at, print=printing)
        if args.web or args.web_session:
            if printing:
                parser.commands["replay"].error("--web shows the monitor in a browser; --once and --json print here")
            return Options(mode="web", replay=replay, web=_web_options(parser.commands["replay"], args, argv),
                           **common)
        given = next((flag for flag in WEB_FLAGS if getattr(args, flag) is not None), None)
        if given is not None:
            parser.commands["replay"].error(f"--{given.replace('_', '-')} goes with --web")
        return Options(mode="replay", replay=replay, **{**common, "json": args.sub_json or args.json})
    if args.subcommand == "demo-train":
        return Options(mode="demo-train", demo_train=DemoTrainOptions(args.steps, args.leak), **common)
    if args.subcommand == "estimate":
        estimate = EstimateOptions(
            job=args.job, batch_size=args.batch_size, optimizer=args.optimizer, precision=args.precision,
            checkpointing=args.checkpointing, device_memory=args.device_memory, gpu=args.gpu,
            max_batch=args.max_batch, zero_gpus=args.zero_gpus, fsdp2=args.fsdp2, what_if=not args.no_what_if)
        return Options(mode="estimate", estimate=estimate, **{**common, "json": args.sub_json or args.json})
    if args.subcommand == "serve":
        _tls_key_with_cert(parser.commands["serve"], args)
        interval = args.interval if args.serve_interval is None else args.serve_interval
        serve = ServeOptions(listen=args.listen, basic_auth_file=args.basic_auth_file, tls_cert=args.tls_cert,
                             tls_key=args.tls_key, hash_password=args.hash_password)
        return Options(mode="serve", serve=serve, **{**common, "interval": interval})
    if args.subcommand == "web":
        return Options(mode="web", web=_web_options(parser.commands["web"], args, argv), **common)
    if args.watch is not None:
        return Options(mode="watch", watch=args.watch, **common)
    if args.json:
        return Options(mode="json", **common)
    if args.once:
        return Options(mode="once", **common)
    return Options(mode="tui", **common)


def _check_hosts(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What --hosts cannot be combined with, said before anything connects."""
    if args.subcommand not in (None, "web"):  # gputui --hosts ... web: the many-host view in a browser
        parser.error(f"--hosts watches other machines; {args.subcommand} works on this one")
    if args.demo is not None:
        parser.error("--hosts shows what the hosts' own gputui sees; for a demo, run it there: "
                     '[hosts] command = "gputui --demo training-node"')
    if args.watch is not None:
        parser.error("--hosts and --watch cannot be combined yet: use the live monitor, or --hosts --json")
    given = [flag for flag, value in (("--only", args.only), ("--only-visible", args.only_visible),
                                      ("--user", args.user != ()), ("--pid", args.pid)) if value]
    if given:
        parser.error(f"{given[0]} filters this machine; with --hosts, filter in the monitor with /")


def _current_user() -> str:
    from gputui.collect.users import current_user

    return current_user()


def main(argv: list[str] | None = None) -> int:
    options = parse(argv)  # argparse writes --help to stderr when stdout is closed
    if sys.stdout is None and not _quiet(options):  # started with stdout closed (gputui >&-)
        if sys.stderr is not None:
            print("gputui: standard output is closed: nothing to show on", file=sys.stderr)
        return 2
    try:
        options, config = _configured(options)
        return _dispatch(options, config)
    except UserError as exc:
        from gputui.untrusted import harmless

        # Messages quote paths, config values and probes' answers: shown, never obeyed. Most quote
        # them made visible already, so the guard leaves backslashes as they are.
        lines = str(exc).split("\n") if exc.multiline else [str(exc)]
        said = sys.stderr or sys.stdout  # standard error closed (2>&-): said where it can be read
        if said is not None:
            print("gputui: " + "\n".join(harmless(line) for line in lines), file=said)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `gputui --json | head` closed the pipe: not an error worth a traceback.
        sys.stderr.close()
        return 0


def _quiet(options: Options) -> bool:
    """Whether the mode writes nothing on standard output: ``gputui serve`` (under systemd, or
    ``>&-``) says where it listens on stderr and answers over HTTP; only --hash-password prints."""
    return options.mode == "serve" and options.serve.hash_password is None


def _no_live_monitor(terminal: ModuleType) -> str | None:
    """Why the live monitor cannot run here ("" when that needs no saying), or None when it can."""
    if not terminal.is_terminal():
        return ""  # into a pipe or a file (gputui | less): printing is what was asked
    if sys.stdin is None or not _stdin_is_terminal():
        return "the live monitor reads keys from a terminal and standard input is not one"
    if os.environ.get("TERM", "dumb") in ("dumb", ""):
        return f"this terminal (TERM={os.environ.get('TERM', '')}) cannot show the live monitor"
    return None


def _stdin_is_terminal() -> bool:
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError):  # closed
        return False


# The modes that read the config file: the monitor's and those that sample. The others run a job, reach a
# probe, read a report or measure a step, and use none of its settings.
CONFIGURED = ("tui", "once", "json", "watch", "serve", "record", "replay", "web")


def _configured(options: Options) -> tuple[Options, Config]:
    """``options`` with the config file under them, and the file's settings (--hosts reads its [hosts]).
    Read here, once a run, by the modes that use it; its key remaps checked against the monitor's keys,
    so every such mode fails alike on a bad file, before it starts."""
    from gputui.config import Config, load_config, resolve

    if options.mode not in CONFIGURED:
        return options, Config()
    config = load_config(options.config)
    if config.keys:  # the bindings live with the app's screens (imports Textual)
        from gputui.ui.startup.keys import check_keymap

        check_keymap(config)
    return resolve(options, config), config


def _mode_here(options: Options, terminal: ModuleType, instead: str) -> Mode:
    """The mode asked for, or "once" where the live monitor cannot run: what --once shows is the best
    such a place can take (why is said on stderr, where it needs saying, with ``instead``)."""
    if options.mode != "tui":
        return options.mode
    why = _no_live_monitor(terminal)
    if why is None:
        return "tui"
    if why:
        print(f"gputui: {why}, so here is {instead}", file=sys.stderr)
    return "once"


def _many_hosts(options: Options, config: Config, terminal: ModuleType) -> int:
    """``--hosts``: the hosts' first answers printed (--once, --json), or the live monitor over them."""
    from gputui.fleet.entries import HostsSettings, host_entries

    settings = config.hosts or HostsSettings()
    entries = host_entries(options.hosts or (), settings)
    mode = _mode_here(options, terminal, "one snapshot of each host instead")
    if mode in ("once", "json"):
        from gputui.fleet import printing

        return getattr(printing, mode)(options, entries, settings.wait)
    from gputui.ui.startup.launch import run_hosts

    if terminal.use_ascii(options) and not options.ascii:
        options = dataclasses.replace(options, ascii=True)
    return run_hosts(options, entries)


def _record_or_replay(options: Options, terminal: ModuleType) -> int:
    from gputui.record import run

    if options.mode == "record":
        return run.record(options)
    if options.replay.print or _no_live_monitor(terminal) is not None:
        return run.print_at(options)
    from gputui.ui.startup.launch import run_replay

    return run_replay(options)


def _dispatch(options: Options, config: Config) -> int:
    if options.mode == "web":  # the browser view of the monitor, of the many-host view or of a replay
        return _web(options, config)
    from gputui.plain import terminal

    if options.hosts is not None:
        return _many_hosts(options, config, terminal)
    mode = _mode_here(options, terminal,
                      "one snapshot instead (gputui --watch repeats it; --json for scripts)")
    if mode in ("once", "json", "watch"):
        from gputui.plain import modes

        return getattr(modes, mode)(options)
    if mode == "serve":
        from gputui.serve.run import serve

        return serve(options)
    if mode in ("probes", "probe"):
        from gputui.plain import probes

        return getattr(probes, mode)(options)
    if mode == "oom":
        from gputui.plain.oom import oom

        return oom(options)
    if mode in ("record", "replay"):
        return _record_or_replay(options, terminal)
    if mode == "tui":
        from gputui.ui.startup.launch import run_tui

        if terminal.use_ascii(options) and not options.ascii:
            # A terminal whose encoding cannot show bars (LANG=C, latin-1) gets the ASCII look.
            options = dataclasses.replace(options, ascii=True)
        return run_tui(options)
    if mode == "run":
        from gputui.launch.run import run_command

        return run_command(options)
    if mode == "attach":
        from gputui.launch.attach import attach

        return attach(options)
    if mode == "detach":
        from gputui.launch.attach import detach

        return detach(options)
    if mode == "demo-train":
        from gputui.probe.demo import demo_train

        return demo_train(options)
    if mode == "estimate":
        return _estimate(options)
    raise AssertionError(f"unknown mode {mode}")


def _web(options: Options, config: Config) -> int:
    """``gputui web``: the server, or (--web-session, which the server adds to each session's command line) one
    browser tab's monitor, under Textual's web driver."""
    if options.web.session:
        from gputui.web.session import run_session

        return run_session(options, config)
    from gputui.web.run import serve_web

    return serve_web(options, config)


def _estimate(options: Options) -> int:
    """``gputui estimate``: torch is imported here, in this mode only (never by the monitor)."""
    from gputui.plain import estimate as shown
    from gputui.plain.document import dumps, estimate_document
    from gputui.plain.terminal import show

    asked = options.estimate
    total, name = shown.device(options, asked.device_memory, asked.gpu)
    try:
        # torch's own warnings while it loads ("Failed to initialize NumPy" where NumPy is missing, which
        # the estimate never uses) are about torch's environment, not the job: left out, so an error stays
        # one line. Only warnings from torch's modules, and only at import: the user's job's still show.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"torch(\.|$)")
            from gputui.estimate.run import estimate
            from gputui.estimate.step import Settings
    except ImportError as exc:
        raise UserError(f"gputui estimate needs PyTorch: {exc}") from None
    settings = Settings(batch_size=asked.batch_size, optimizer=asked.optimizer, precision=asked.precision,
                        checkpointing=asked.checkpointing)
    result = estimate(asked.job, settings, total, name, what_if=asked.what_if, max_batch=asked.max_batch,
                      gpus=asked.zero_gpus, fsdp2=asked.fsdp2)
    return show(dumps(estimate_document(result)) + "\n" if options.json else shown.text(result))
