"""The pwl suite's warm-up (as long as the timed solve unless told otherwise) and what it
counts as a proof of optimality."""

from benchmarks import pwl as suite


def test_the_warm_up_solve_is_as_long_as_the_timed_one(monkeypatch):
    # A 3 s warm-up ended where XLA's compilation did on many instances, so the timed
    # solve compiled the rest and its time was mostly that (transportation_4x5_k8: 3.5 to
    # 6.1 s timed, 0.2 to 0.3 s solved again)
    limits, polishes = [], []
    monkeypatch.setattr(suite, "solve_pwl", lambda model, options: limits.append(options))
    monkeypatch.setattr(suite, "solve_lp", lambda lp, options: polishes.append(options))

    class Model:
        def compile(self):
            return type("Compiled", (), {"lp": None})()

    suite._warm_up(Model(), 20.0)
    suite._warm_up(Model(), 15.0, 16)
    suite._warm_up(Model(), 20.0, seconds=3.0)  # the GPU script's, whose device time is short
    suite._warm_up(Model(), 2.0, seconds=3.0)
    assert [(o.time_limit, o.batch_size) for o in limits] == [
        (20.0, suite.BATCH), (15.0, 16), (3.0, suite.BATCH), (2.0, suite.BATCH),
    ]  # fmt: skip
    # the polishing LP compiles with the timed solve's options
    timed = suite.polish_options(suite._options(20.0))
    assert polishes[0] == timed and polishes[2] == timed


def test_only_a_proof_at_the_gap_counts_as_solved_and_early_stops_take_the_whole_limit():
    # an OPTIMAL "to the node LPs' tolerance only" (gap above 1e-4) or an INCOMPLETE stop
    # after 2 s counted as proven / as a 2 s solve
    def row(status, gap, seconds, highs="optimal", highs_seconds=4.0):
        ours = {"status": status, "gap": gap, "seconds": seconds}
        return {"ours": ours, "highs": {"status": highs, "seconds": highs_seconds}}

    proof = row("OPTIMAL", 1e-4, 2.0)
    loose = row("OPTIMAL", 3e-3, 2.0)
    stopped = row("INCOMPLETE", 0.5, 2.0, highs="time limit", highs_seconds=20.4)
    assert suite.proven(proof, "ours") and suite.proven(proof, "highs")
    assert not suite.proven(loose, "ours") and not suite.proven(stopped, "highs")
    assert suite.time_to_proof(proof, "ours", 20.0) == 2.0
    assert suite.time_to_proof(loose, "ours", 20.0) == 20.0
    assert suite.time_to_proof(stopped, "ours", 20.0) == 20.0
    assert suite.time_to_proof(stopped, "highs", 20.0) == 20.0
    assert suite.time_to_proof(row("OPTIMAL", 0.0, 25.0), "ours", 20.0) == 20.0


def test_throughput_warms_every_batch_size_then_alternates_them_and_reports_the_median(
    monkeypatch,
):
    # every B is warmed up first, then the rounds alternate the batch sizes, so that a
    # change in the machine's load shows as spread between a B's runs
    calls = []
    rates = iter([50.0, 400.0, 70.0, 700.0, 60.0, 650.0])
    monkeypatch.setattr(suite, "_warm_up", lambda model, seconds, B: calls.append(("warm", B)))

    def ours(model, seconds, B):
        calls.append(("timed", B))
        return {"nodes_per_second": next(rates), "B": B}

    monkeypatch.setattr(suite, "_ours", ours)
    out = suite._throughput(None, 15.0, (1, 64), 3)
    assert calls == [("warm", 1), ("warm", 64)] + [("timed", 1), ("timed", 64)] * 3
    assert out["1"]["nodes_per_second"] == 60.0 and out["64"]["nodes_per_second"] == 650.0
    assert out["1"]["nodes_per_second_runs"] == [50.0, 70.0, 60.0]
    assert out["64"]["nodes_per_second_runs"] == [400.0, 700.0, 650.0]
    # an even count takes the lower middle run
    two = suite._median_run([{"nodes_per_second": 3.0}, {"nodes_per_second": 1.0}])
    assert two["nodes_per_second"] == 1.0
