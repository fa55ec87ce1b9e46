"""The pwl suite's warm-up: as long as the timed solve (unless told otherwise)."""

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
