"""Multi-objective RL metrics: hypervolume against hand-computed boxes, an exact grid count
and Monte Carlo; the Pareto front and sparsity against hand examples; input checks."""

import itertools

import numpy as np
import pytest

from jaxopt_suite.rl.morl_metrics import hypervolume, pareto_front, sparsity


def grid_hypervolume(points, reference):
    """Exact hypervolume by brute force: the points' coordinates cut space into cells, each
    covered or not as a whole; a cell is covered when a point dominates its upper corner."""
    points = np.asarray(points, dtype=float)
    points = points[np.all(points > reference, axis=1)]
    edges = [np.unique(np.append(points[:, j], reference[j])) for j in range(len(reference))]
    uppers = np.stack(np.meshgrid(*[e[1:] for e in edges], indexing="ij"), axis=-1)
    widths = np.meshgrid(*[np.diff(e) for e in edges], indexing="ij")
    covered = np.all(points >= uppers[..., None, :], axis=-1).any(axis=-1)
    return float(np.sum(np.prod(widths, axis=0) * covered))


@pytest.mark.parametrize(
    ("points", "reference", "expected"),
    [
        ([[3.0, 2.0]], [1.0, 0.0], 2.0 * 2.0),
        # two overlapping boxes: 3 + 2 - 1
        ([[3.0, 1.0], [1.0, 2.0]], [0.0, 0.0], 4.0),
        ([[2.0, 3.0, 4.0]], [0.0, 0.0, 0.0], 24.0),
        ([[2.0, 3.0, 4.0]], [1.0, 1.0, 1.0], 1.0 * 2.0 * 3.0),
        # two 3-D boxes: 6 + 6 - their intersection [0,1] x [0,1] x [0,2]
        ([[3.0, 1.0, 2.0], [1.0, 3.0, 2.0]], [0.0, 0.0, 0.0], 10.0),
        # a 3-D staircase by inclusion-exclusion: 3 * 6 - 3 * 2 + 1
        ([[1.0, 2.0, 3.0], [2.0, 3.0, 1.0], [3.0, 1.0, 2.0]], [0.0, 0.0, 0.0], 13.0),
        ([[1.0, 2.0, 3.0, 4.0]], [0.0, 0.0, 0.0, 0.0], 24.0),
        # m = 1: the best point's excess over the reference
        ([[0.5], [2.0], [-1.0]], [0.0], 2.0),
        # points on the reference's boundary or below it contribute nothing
        ([[3.0, 0.0], [2.0, 2.0], [-1.0, 5.0]], [0.0, 0.0], 4.0),
        ([[0.0, 0.0, 1.0]], [0.0, 0.0, 0.0], 0.0),
        (np.zeros((0, 3)), [0.0, 0.0, 0.0], 0.0),
        # negative returns, reference below them
        ([[-1.0, -2.0], [-2.0, -1.0]], [-3.0, -3.0], 2.0 + 2.0 - 1.0),
    ],
)
def test_hypervolume_hand_examples(points, reference, expected):
    assert hypervolume(points, reference) == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_hypervolume_ignores_order_dominated_points_and_repeats():
    rng = np.random.default_rng(0)
    for m in (2, 3, 4):
        points = rng.uniform(0.0, 1.0, (15, m))
        reference = np.full(m, 0.1)
        base = hypervolume(points, reference)
        # points each below some given point, and exact repeats
        shrunk = points[rng.integers(0, 15, 20)] * rng.uniform(0.5, 1.0, (20, m))
        extended = np.concatenate([points, shrunk, points[:5]])
        assert hypervolume(extended, reference) == pytest.approx(base, rel=1e-12)
        assert hypervolume(extended[rng.permutation(len(extended))], reference) == (
            pytest.approx(base, rel=1e-12)
        )
        assert hypervolume(pareto_front(points), reference) == pytest.approx(base, rel=1e-12)


@pytest.mark.parametrize("m", [2, 3, 4])
def test_hypervolume_matches_exact_grid_count(m):
    rng = np.random.default_rng(m)
    for trial in range(5):
        # integer coordinates make ties in every objective common
        points = rng.integers(0, 6, (10, m)).astype(float) if trial % 2 else rng.random((10, m))
        reference = np.full(m, 0.5 if trial % 2 else 0.1)
        expected = grid_hypervolume(points, reference)
        assert hypervolume(points, reference) == pytest.approx(expected, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("m", [3, 4])
def test_hypervolume_agrees_with_monte_carlo(m):
    rng = np.random.default_rng(10 + m)
    points = rng.uniform(0.05, 1.0, (25, m))
    reference = np.zeros(m)
    upper = points.max(axis=0)
    box = float(np.prod(upper - reference))
    samples = 200_000
    draws = rng.uniform(reference, upper, (samples, m))
    covered = np.zeros(samples, dtype=bool)
    for point in points:
        covered |= np.all(draws <= point, axis=1)
    fraction = covered.mean()
    standard_error = box * np.sqrt(fraction * (1.0 - fraction) / samples)
    assert abs(hypervolume(points, reference) - box * fraction) <= 5.0 * standard_error


def test_hypervolume_of_a_large_four_objective_front_is_quick_and_bounded():
    # 120 points on the positive unit sphere, none dominating another: the worst case of
    # slicing. Their volume lies between the largest single box and the orthant's share
    # of the unit ball, pi^2 / 2 / 16.
    rng = np.random.default_rng(1)
    points = np.abs(rng.normal(size=(120, 4)))
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    assert len(pareto_front(points)) == 120
    volume = hypervolume(points, np.zeros(4))
    assert np.prod(points, axis=1).max() < volume < np.pi**2 / 32


def test_pareto_front_hand_example():
    points = [
        [1.0, 2.0],
        [2.0, 1.0],
        [0.0, 0.0],
        [1.0, 2.0],  # repeat of the first
        [1.5, 1.5],
        [1.0, 1.0],  # dominated by [1, 2] although equal in the first objective
        [2.0, 0.5],  # dominated by [2, 1]
        [-5.0, 3.0],
    ]
    np.testing.assert_array_equal(
        pareto_front(points), [[1.0, 2.0], [2.0, 1.0], [1.5, 1.5], [-5.0, 3.0]]
    )
    front = pareto_front(np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]], dtype=np.float32))
    assert front.dtype == np.float64
    np.testing.assert_array_equal(front, [[1.0, 2.0, 3.0]])
    np.testing.assert_array_equal(pareto_front([[0.5], [2.0], [2.0], [-1.0]]), [[2.0]])
    assert pareto_front(np.zeros((0, 2))).shape == (0, 2)


def test_pareto_front_keeps_exactly_the_undominated_points():
    rng = np.random.default_rng(2)
    points = rng.integers(0, 4, (40, 3)).astype(float)
    front = pareto_front(points)
    for point in points:
        dominated = any(np.all(other >= point) and np.any(other > point) for other in points)
        assert dominated != any(np.array_equal(point, kept) for kept in front)
    assert len(np.unique(front, axis=0)) == len(front)
    for a, b in itertools.combinations(front, 2):
        assert not (np.all(a >= b) or np.all(b >= a))


def test_sparsity_hand_examples():
    # each objective's sorted values 0, 1, 3: gaps 1 and 2, so (1 + 4) * 2 / (3 - 1)
    front = [[0.0, 3.0], [1.0, 1.0], [3.0, 0.0]]
    assert sparsity(front) == pytest.approx(5.0)
    # dominated points and repeats change nothing
    assert sparsity(front + [[0.5, 0.5], [1.0, 1.0], [0.0, 0.0]]) == pytest.approx(5.0)
    assert sparsity([[0.0, 1.0], [1.0, 0.0]]) == pytest.approx(2.0)
    # each objective's sorted values 0, 0, 1: one unit gap each, so 3 / 2
    assert sparsity(np.eye(3)) == pytest.approx(1.5)
    assert sparsity([[1.0, 2.0]]) == 0.0
    assert sparsity([[1.0, 2.0], [0.0, 0.0], [1.0, 2.0]]) == 0.0
    assert sparsity(np.zeros((0, 4))) == 0.0
    # a denser front with the same extent is sparser by the number of gaps
    line = np.linspace(0.0, 1.0, 11)
    assert sparsity(np.stack([line, 1.0 - line], axis=1)) == pytest.approx(2 * 10 * 0.1**2 / 10)


@pytest.mark.parametrize("metric", [pareto_front, sparsity, lambda p: hypervolume(p, [0.0, 0.0])])
@pytest.mark.parametrize(
    ("points", "match"),
    [
        ([1.0, 2.0], r"points must be an \(n, m\) array .* got shape \(2,\)"),
        (np.zeros((2, 2, 2)), r"points must be an \(n, m\) array .* got shape \(2, 2, 2\)"),
        (np.zeros((3, 0)), r"points must be an \(n, m\) array .*m >= 1.* got shape \(3, 0\)"),
        ([[1.0, 2.0], [np.nan, 1.0]], r"points must be finite, got 1 non-finite .* row 1"),
        ([[np.inf, 2.0], [1.0, -np.inf]], r"points must be finite, got 2 non-finite .* row 0"),
    ],
)
def test_bad_points_are_rejected(metric, points, match):
    with pytest.raises(ValueError, match=match):
        metric(points)


@pytest.mark.parametrize(
    ("reference", "match"),
    [
        ([0.0, 0.0, 0.0], r"reference must have shape \(2,\) .* got shape \(3,\)"),
        ([[0.0, 0.0]], r"reference must have shape \(2,\) .* got shape \(1, 2\)"),
        (0.0, r"reference must have shape \(2,\) .* got shape \(\)"),
        ([0.0, np.nan], r"reference must be finite, got \[0.0, nan\]"),
        ([-np.inf, 0.0], r"reference must be finite"),
    ],
)
def test_bad_reference_is_rejected(reference, match):
    with pytest.raises(ValueError, match=match):
        hypervolume([[1.0, 2.0], [2.0, 1.0]], reference)
