"""The compose files cannot run here (no Docker): their commands are checked against the
project's own, so that they stay in step with what the tests run."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobsctl.cli import build_parser

yaml = pytest.importorskip("yaml")  # (a dev dependency)
ROOT = Path(__file__).resolve().parents[1]
SPARK_CLASSES = {"org.apache.spark.deploy.master.Master", "org.apache.spark.deploy.worker.Worker"}


def services(name: str) -> dict:
    return yaml.safe_load((ROOT / name).read_text())["services"]


def test_the_cluster_file_runs_jobs_commands_that_parse():
    found = services("docker-compose.cluster.yml")
    commands = {name: s["command"] for name, s in found.items() if s.get("command", [None])[0] == "jobs"}
    assert set(commands) == {"monitor", "processor-1", "processor-2", "status"}
    for name, command in commands.items():
        args = build_parser().parse_args(command[1:])  # exits (SystemExit) on a stale flag
        assert args.run is not None, name
    assert commands["processor-1"][1:3] == ["worker", "pipeline.worker:processor"]
    status = commands["status"]
    assert "--token-file" in status and status[status.index("--host") + 1] == "0.0.0.0"  # a token outside loopback


def test_the_cluster_file_starts_sparks_own_master_and_worker():
    found = services("docker-compose.cluster.yml")
    spark = {s["command"][1] for s in found.values() if s.get("command", [None])[0] == "spark-class"}
    assert spark == SPARK_CLASSES
    master = found["spark-master"]["command"]
    port = master[master.index("--port") + 1]
    for s in found.values():
        if "JOBS_SPARK_MASTER" in s.get("environment", {}):
            assert s["environment"]["JOBS_SPARK_MASTER"] == f"spark://spark-master:{port}"


def test_every_service_shares_the_cluster_file_and_the_tables():
    found = services("docker-compose.cluster.yml")
    for name in ("monitor", "processor-1", "processor-2", "status", "spark-worker"):
        mounts = {v.split(":")[1] for v in found[name]["volumes"]}
        assert {"/var/fdb", "/data"} <= mounts, name
