import pytest

from commbench.units import format_size, parse_size


@pytest.mark.parametrize("text,num", [("8B", 8), ("8", 8), ("64KiB", 65536), ("64K", 65536), ("1GiB", 1 << 30),
                                      ("1MB", 1_000_000), ("1.5KiB", 1536), (4096, 4096), ("8 GiB", 8 << 30)])
def test_parse(text, num):
    assert parse_size(text) == num


@pytest.mark.parametrize("bad", ["12XB", "KiB", "-1", "1.3B", True, None, 1.5, [1]])
def test_parse_rejects(bad):
    with pytest.raises(ValueError):
        parse_size(bad)


@pytest.mark.parametrize("num,text", [(8, "8B"), (1024, "1KiB"), (1536, "1536B"), (8 << 30, "8GiB"), (3 << 20, "3MiB")])
def test_format(num, text):
    assert format_size(num) == text
