"""The many-host view's main screen: a line for all the hosts, each host's line and GPUs, and one
process table for every host with a HOST column. Sorting, the filter, the tree and the detail
screen work as on one machine; signals do not (the processes are on other machines).
"""

from __future__ import annotations

from collections import Counter

from textual.app import ComposeResult
from textual.containers import Container
from textual.content import Content

from gputui import units
from gputui.model import HOST_STATES
from gputui.sample.judge import Sample
from gputui.ui import format as fmt
from gputui.ui.actions.signals import Target, kill_command
from gputui.ui.main_screen import MainScreen, process_count
from gputui.ui.state import ManyHosts, MonitorState
from gputui.ui.table import rows as table_rows
from gputui.ui.table.columns import DEFAULT
from gputui.ui.table.job_rows import JobSource
from gputui.ui.widgets.hosts import HostList
from gputui.ui.widgets.line import Line

NO_CHARTS = "The many-host view has no GPU charts: a process's detail screen (Enter) charts its history."


class HostsScreen(MainScreen):
    """Every host's devices and processes at a glance."""

    def __init__(self, monitor: MonitorState, hosts: ManyHosts, *, ascii: bool = False,
                 columns: tuple[str, ...] = DEFAULT, me: str | None = None) -> None:
        """``hosts``: what the many-host view shows (every host's latest, its HostState), its source's."""
        super().__init__(monitor, ascii=ascii, columns=columns, me=me)
        self.hosts = hosts
        self.charts_on = False

    def compose_top(self) -> ComposeResult:
        yield Line(id="header")
        with Container(id="top"):
            yield HostList(ascii=self.ascii, id="devices")

    def shown_columns(self) -> tuple[str, ...]:
        return ("host", *(c for c in self.chosen_columns if c != "host"))

    def render_snapshot(self) -> None:
        hosts = self.hosts.hosts
        self.query_one("#header", Line).show(self.summary())
        if not hosts:
            return
        self.stale = False
        self.query_one(HostList).show(hosts, self.layout_mode)
        self.render_table()

    def summary(self) -> Content:
        """The line over every host: how many are up, the time, the interval, the monitor's cost."""
        view, hosts = self.hosts, self.hosts.hosts
        if not hosts:
            return Content.styled("gputui · connecting to the hosts…", "$text-muted")
        states = Counter(h.state for h in hosts)
        counts = ", ".join(f"{states[s]} {s}" for s in HOST_STATES if states[s])
        state = Content.styled(" PAUSED ", "reverse $warning") if self.monitor.source.paused else Content.styled(
            f"every {self.monitor.interval:g}s", "$text-muted")
        parts = [Content.styled(f"{len(hosts)} host{'s' if len(hosts) != 1 else ''}", "bold"),
                 Content(counts), Content.styled(units.clock_time(view.sampled_at), "bold"), state]
        cost = fmt.monitor_cost(view.cost)
        if cost and self.layout_mode != "tiny":
            parts.append(Content.styled(cost, "$text-muted"))
        return Content("  ").join(parts)

    def rows_to_show(self) -> tuple[list[table_rows.Row], int] | None:
        hosts = [table_rows.HostRows(name, sample.snapshot, sample.trends, sample.leaks)
                 for name, sample in self.judged_hosts()]
        found = table_rows.build_host_rows(
            hosts, sort=self.sort_column, reverse=self.sort_reverse, filter_text=self.filter_text,
            only_user=self.me if self.only_mine else None, tree=self.tree_view, ascii=self.ascii)
        return found, sum(process_count(h.snapshot) for h in hosts)

    def job_sources(self) -> list[JobSource]:
        return [JobSource(sample.snapshot, sample.trends, name, sample.judgements)
                for name, sample in self.judged_hosts()]

    def judged_hosts(self) -> list[tuple[str, Sample]]:
        """Each host that sent a snapshot this time, in order, with its latest judged sample (its HostState's)."""
        found = []
        for host in self.hosts.hosts:
            state = self.hosts.states.get(host.name)
            if host.snapshot is not None and state is not None and state.latest is not None:
                found.append((host.name, state.latest))
        return found

    def signal_target(self) -> Target | None:
        return None  # never another machine's process: why_no_signal_target says so

    def why_no_signal_target(self, name: str) -> str:
        row = self.selected_row()
        if row is None or row.host is None:
            return "Select a process first."
        return (f"Process {row.pid} runs on {row.host}: the many-host view is read-only and sends no "
                f"signal to another machine. To signal it there: ssh {row.host} {kill_command(name, row.pid)}")

    def action_toggle_charts(self) -> None:
        self.notify(NO_CHARTS)

    def action_next_gpu(self) -> None:
        self.notify(NO_CHARTS)
