"""The capacity model (``bench/capacity.py``): counted per job on a real store, and the
model's arithmetic over those counts."""

from __future__ import annotations

import json

import pytest

from bench import capacity


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("capacity") / "out.json"
    assert capacity.main(["--jobs", "40", "--batch", "8", "--gathers", "2", "--processes", "8", "32",
                          "--json", str(out)]) == 0
    return json.loads(out.read_text())


def test_every_transaction_of_a_job_is_counted(result):
    labels = result["per transaction"]
    for path in result["paths"].values():  # the busiest key at the modelled rate is one the jobs share
        for models in path["model"].values():
            for m in models.values():
                assert m["busiest key"] is not None and 0 < m["busiest key writes_per_s"] < m["jobs_per_s"]
    for label in ("add", "accept", "update", "finish"):
        assert labels[label]["transactions counted"] == 40
        assert labels[label]["writes"] >= 1 and labels[label]["bytes_written"] > 0
    assert labels["accept"]["range_reads"] >= 1  # the pending range
    assert labels["add_many"]["transactions counted"] == 5  # 40 jobs, 8 per transaction
    gather = labels["status gather"]
    assert gather["transactions counted"] >= 2 and gather["writes"] == 0 and gather["keys_read"] > 0
    one = result["paths"]["one per transaction"]["per job"]
    assert one["transactions"] == 4.0
    assert result["paths"]["batched"]["per job"]["transactions"] < 1


def test_keys_jobs_share_are_found(result):
    """couch_jobs' activity stamp (every change to a job writes it) and pending wake (every
    enqueue) are spread over their shards (layout 6), as are the counters."""
    hot = result["paths"]["one per transaction"]["hot keys"]["writes"]
    for name, per_job in (("watches_activity", 4.0), ("watches_pending", 1.0)):
        shards = [rate for key, rate in hot if f"'{name}', 'capacity'," in key]
        assert sum(shards) == pytest.approx(per_job) and 2 <= len(shards) <= 16 and max(shards) <= per_job / 2
    assert not any(key.endswith(("'watches_activity', 'capacity')", "'watches_pending', 'capacity')")) for key, _ in hot)
    assert "<id>" not in " ".join(k for k, _ in hot)  # a job's own keys are not shared
    assert any("watches_pending" in k for k in result["per transaction"]["add"]["shared keys written"])


def test_the_model_is_the_tightest_of_its_limits(result):
    limits = result["limits"]
    for path in result["paths"].values():
        for scope, models in path["model"].items():
            for n, m in models.items():
                assert m["jobs_per_s"] == min(m["ceilings"].values())
                storage = round(int(n) * limits["storage_share"])
                expected = storage * limits["writes_per_process"] / (limits["replication"] * path["per job"]["writes"])
                assert m["ceilings"]["storage writes"] == pytest.approx(expected)
                if scope != "one type":  # a store of many types: no one type's key binds it
                    assert not any("'capacity'" in k for k in m["ceilings"])


def test_bad_arguments_are_refused(capsys):
    for argv in (["--jobs", "0"], ["--storage-share", "1.5"], ["--replication", "0"], ["--key-limit", "-1"]):
        with pytest.raises(SystemExit) as exc:
            capacity.main(argv)
        assert exc.value.code == 2
    assert "--storage-share" in capsys.readouterr().err


def test_a_simulation_measures_what_the_model_predicts(tmp_path):
    """Concurrent workers write the shared keys as often per job as the sequential count
    says (the activity stamps: once per transaction that changes a job, over the shards;
    the pending wake key: once per add)."""
    out = tmp_path / "sim.json"
    assert capacity.main(["--jobs", "60", "--gathers", "1", "--processes", "8", "--simulate", "4",
                          "--json", str(out)]) == 0
    sim = json.loads(out.read_text())["simulation"]
    assert sim["jobs"] == 60 and sim["workers"] == 4 and sim["jobs_per_s"] > 0
    stamps = [(m, p) for key, m, p in sim["keys"] if "'watches_activity', 'capacity-sim'," in key]
    assert sum(m for m, _p in stamps) == pytest.approx(4 * sim["jobs_per_s"])
    assert sum(p for _m, p in stamps) == pytest.approx(4 * sim["jobs_per_s"])
    wakes = [(m, p) for key, m, p in sim["keys"] if "'watches_pending', 'capacity-sim'," in key]
    assert sum(m for m, _p in wakes) == pytest.approx(sim["jobs_per_s"])
