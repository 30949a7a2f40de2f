"""Every formula against values computed by hand from nccl-tests' definitions."""
import pytest

from commbench import metrics

GB = 1e9


@pytest.mark.parametrize("n,factor", [(2, 1.0), (3, 4 / 3), (8, 1.75)])
def test_all_reduce_bus_factor(n, factor):
    assert metrics.bus_factor("all_reduce", n) == pytest.approx(factor)


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter", "alltoall", "gather", "scatter"])
@pytest.mark.parametrize("n,factor", [(2, 0.5), (3, 2 / 3), (8, 0.875)])
def test_gather_family_bus_factor(op, n, factor):
    assert metrics.bus_factor(op, n) == pytest.approx(factor)


@pytest.mark.parametrize("op", ["broadcast", "reduce", "sendrecv"])
def test_rooted_bus_factor_is_one(op):
    for n in (2, 3, 8):
        assert metrics.bus_factor(op, n) == 1.0


def test_all_reduce_1gib_on_8_ranks():
    # 1 GiB float32 in 5000 us: algbw = 2^30 / 5e-3 s = 214.748 GB/s; busbw x 1.75 = 375.809
    size = 1 << 30
    t_us = 5000.0
    count = metrics.element_count("all_reduce", size, 4, 8)
    assert count == size // 4
    alg = metrics.gbps(metrics.algbw_bytes("all_reduce", count, 4, 8), t_us)
    assert alg == pytest.approx(214.748364, rel=1e-6)
    assert metrics.busbw_gbps("all_reduce", size, 4, 8, t_us) == pytest.approx(375.80964, rel=1e-6)


def test_all_gather_size_is_total_buffer_3_ranks():
    # 3 ranks, 1200 B float32 total: count per rank = 100; algbw bytes = 100*4*3 = 1200
    count = metrics.element_count("all_gather", 1200, 4, 3)
    assert count == 100
    assert metrics.algbw_bytes("all_gather", count, 4, 3) == 1200
    # 1200 B in 1 us = 1.2 GB/s; busbw x 2/3 = 0.8
    assert metrics.busbw_gbps("all_gather", 1200, 4, 3, 1.0) == pytest.approx(0.8)


@pytest.mark.parametrize("op", ["gather", "scatter"])
def test_gather_scatter_size_is_the_roots_whole_buffer(op):
    # nccl-tests gather/scatter: count per rank = size / ts / n, algbw = count*ts*n / t
    # 4 ranks, 4096 B float32 at the root: 256 elements per rank; in 2 us algbw 2.048, busbw x 3/4
    count = metrics.element_count(op, 4096, 4, 4)
    assert count == 256 and metrics.algbw_bytes(op, count, 4, 4) == 4096
    assert metrics.busbw_gbps(op, 4096, 4, 4, 2.0) == pytest.approx(4096 / 2e-6 / GB * 0.75)


def test_count_rounds_down_like_nccl_tests():
    # 1000 B of float32 over 3 ranks: 250 elements -> 83 per rank; effective bytes 83*4*3 = 996
    count = metrics.element_count("reduce_scatter", 1000, 4, 3)
    assert count == 83
    assert metrics.algbw_bytes("reduce_scatter", count, 4, 3) == 996


def test_alltoall_2_ranks():
    # per-rank send buffer 8 MiB bf16 over 2 ranks: count per peer 2 Mi elements
    size = 8 << 20
    count = metrics.element_count("alltoall", size, 2, 2)
    assert count == (size // 2) // 2
    assert metrics.busbw_gbps("alltoall", size, 2, 2, 100.0) == pytest.approx(size / 100e-6 / GB * 0.5)


def test_sendrecv_and_broadcast_use_whole_buffer():
    assert metrics.element_count("sendrecv", 4096, 4, 8) == 1024
    assert metrics.busbw_gbps("broadcast", 4096, 4, 8, 2.0) == pytest.approx(4096 / 2e-6 / GB)


def test_single_rank_busbw_is_zero_for_all_reduce():
    assert metrics.busbw_gbps("all_reduce", 1 << 20, 4, 1, 10.0) == 0.0


def test_summary_statistics():
    s = metrics.summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert s == {"time_us": 3.0, "time_us_min": 1.0, "time_us_p90": pytest.approx(4.6),
                 "time_us_p99": pytest.approx(4.96), "time_us_max": 5.0}


def test_p99_sits_between_p90_and_max_and_sees_one_slow_iteration_in_a_hundred():
    times = [10.0] * 99 + [1000.0]
    s = metrics.summarize(times)
    assert s["time_us"] == 10.0 and s["time_us_p90"] == 10.0
    assert s["time_us_p99"] == pytest.approx(10.0 + 0.01 * 990.0)   # linear interpolation
    assert s["time_us_p90"] <= s["time_us_p99"] <= s["time_us_max"] == 1000.0


def test_rank_time_reduces_each_iteration_over_the_ranks():
    per_rank = [[1.0, 5.0, 3.0], [2.0, 4.0, 9.0]]
    assert metrics.reduce_ranks(per_rank) == [2.0, 5.0, 9.0]              # default: the slowest rank
    assert metrics.reduce_ranks(per_rank, "max") == [2.0, 5.0, 9.0]
    assert metrics.reduce_ranks(per_rank, "min") == [1.0, 4.0, 3.0]
    assert metrics.reduce_ranks(per_rank, "avg") == [1.5, 4.5, 6.0]
    assert metrics.reduce_ranks(per_rank, "rank0") == [1.0, 5.0, 3.0]
    assert metrics.reduce_ranks([[1.0, 2.0], [3.0]], "max") == [3.0]      # the shortest rank's iterations
    with pytest.raises(ValueError, match="rank_time 'sum'"):
        metrics.reduce_ranks(per_rank, "sum")


def test_gbps_guards_zero_time():
    assert metrics.gbps(100, 0) == 0.0
