"""--once's Jobs section and `gputui probes` grouped by job."""

from dataclasses import replace

from plain_data import judged

from gputui.model import Job, JobDevice, JobRank, Placement, ProbeReport, Snapshot
from gputui.plain.jobs import indices, job_lines
from gputui.plain.report import render_probe_list

GiB = 1 << 30


def two_rank_job(**kw):
    ranks = tuple(JobRank(pid=200 + r, rank=r, devices=(JobDevice(r, (r + 1) * GiB),), gpu_memory=(r + 1) * GiB,
                          probed=r == 0) for r in range(2))
    return Job(key="launcher 100", name="train.py (torchrun)", grouped_by="launcher", launcher="torchrun",
               launcher_pid=100, world_size=4, ranks=ranks, devices=(0, 1), gpu_memory=3 * GiB, **kw)


def jobs_section(snapshot):
    """--once's Jobs section of ``snapshot``, its findings judged as the modes judge them."""
    return job_lines(snapshot, judged(snapshot), 100, "...")


def plain(lines):
    return [line.plain for line in lines]


def test_a_spread_job_gets_a_short_section():
    job = two_rank_job(notes=("process 9: its environment could not be read",))
    single = Job(key="launcher 7", name="solo.py (torchrun)", grouped_by="launcher",
                 ranks=(JobRank(pid=8, devices=(JobDevice(0, GiB),)),), devices=(0,))
    assert plain(jobs_section(Snapshot(taken_at=0.0, jobs=(single, job)))) == [
        "",
        "Jobs  * probed",
        "train.py (torchrun)  2 ranks of 4, GPUs 0-1, 3.00 GiB, torchrun pid 100",
        "  rank 0* GPU0 1.00GiB  rank 1 GPU1 2.00GiB",
        "  ! process 9: its environment could not be read",
        "  ! rank 1 holds 2.00 GiB, 2.0x the others' median 1.00 GiB",  # the analysis, a line a finding
    ]
    assert jobs_section(Snapshot(taken_at=0.0, jobs=(single,))) == []  # one rank, one GPU: no section


def test_the_probed_legend_only_where_a_rank_is_probed():
    job = two_rank_job()
    unprobed = replace(job, ranks=tuple(replace(rank, probed=False) for rank in job.ranks))
    lines = plain(jobs_section(Snapshot(taken_at=0.0, jobs=(unprobed,))))
    assert lines[:3] == ["", "Jobs", "train.py (torchrun)  2 ranks of 4, GPUs 0-1, 3.00 GiB, torchrun pid 100"]
    assert lines[3] == "  rank 0 GPU0 1.00GiB  rank 1 GPU1 2.00GiB"  # no mark, so no legend for one


def test_indices_shorten_runs():
    assert indices((7, 0, 1, 2, 3, 5)) == "0-3,5,7"
    assert indices((4,)) == "4"


def test_probes_list_puts_a_jobs_ranks_together_under_its_name():
    def report(pid, rank=None):
        placement = Placement(rank=rank, world_size=4) if rank is not None else None
        return ProbeReport(pid=pid, taken_at=0.0, torch_version="2.13.0", command=("python", "x.py"),
                           placement=placement)

    out = render_probe_list([report(50), report(201, 1), report(200, 0)], {}, jobs=(two_rank_job(),), width=100)
    rows = [line.split()[:2] for line in out.splitlines()]
    assert rows == [["PID", "RANK"], ["train.py", "(torchrun)"], ["200", "0"], ["201", "1"], ["50", "-"]]


def test_demo_json_carries_the_jobs_of_the_new_scenarios():
    import json
    import os

    from cli_helpers import ROOT, gputui

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    dp = json.loads(gputui(env, "--demo", "dataparallel", "--json").stdout)["snapshot"]["jobs"]
    assert [(j["grouped_by"], j["name"], j["devices"]) for j in dp] == [
        ("devices", "train_dp.py (one process, 4 GPUs)", [0, 1, 2, 3])]
    memory = [d["gpu_memory"] for d in dp[0]["ranks"][0]["devices"]]
    assert memory[0] > 2 * max(memory[1:])  # device 0 holds the most
    (job,) = json.loads(gputui(env, "--demo", "torchrun", "--json").stdout)["snapshot"]["jobs"]
    assert (job["launcher"], job["world_size"], job["key"]) == ("torchrun", 16, "launcher 70100")
    assert [(r["rank"], r["local_rank"], r["group_rank"]) for r in job["ranks"]] == [(8 + i, i, 1) for i in range(8)]


def test_a_probed_rank_says_where_it_sits():
    from gputui.plain.report import placement_text

    assert placement_text(Placement(rank=13, local_rank=5, world_size=16, group_rank=1,
                                    rendezvous="torchelastic gpt13b-0412")) == (
        "rank 13 of 16 (local rank 5, node 1), torchelastic gpt13b-0412")
    assert placement_text(Placement(rendezvous="master h:1")) == "rank ?, master h:1"


def test_the_exporter_and_the_many_host_view_carry_the_job(tmp_path):
    import json
    import os

    from cli_helpers import ROOT, gputui
    from serve_helpers import fetch, serving

    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CONFIG_HOME": str(tmp_path)}
    with serving(env, "--demo", "torchrun", "serve", "--listen", "127.0.0.1:0") as (_, url):
        status, _, body = fetch(url + "/snapshot")
        assert status == 200
        (job,) = json.loads(body)["snapshot"]["jobs"]
        assert (job["name"], len(job["ranks"]), job["world_size"]) == ("pretrain.py (torchrun)", 8, 16)
        hosts = gputui(env, "--hosts", url, "--once")
    assert "pretrain.py (torchrun)  8 ranks of 16, GPUs 0-7" in hosts.stdout, hosts.stdout + hosts.stderr
