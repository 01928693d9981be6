"""The screen's sizes: each figure in its own unit, never rounded up to 1024 of a unit."""

from gputui.ui import format as fmt

GIB, MIB = 1 << 30, 1 << 20


def test_each_figure_of_a_pair_keeps_its_own_unit():
    # The device line and the header put used/total side by side: 504 MiB must not read 0.0G.
    pair = f"{fmt.size(504 * MIB, short=True)}/{fmt.size(int(79.6 * GIB), short=True)}"
    assert pair == "504M/79.6G"
    host = f"{fmt.size(137 * GIB, short=True)}/{fmt.size(2016 * GIB, short=True)}"
    assert host == "137G/2.0T"


def test_a_figure_that_rounds_to_1024_moves_up_a_unit():
    assert fmt.size(int(1023.6 * MIB)) == "1.0 GiB"
    assert fmt.size(int(1023.6 * MIB), short=True) == "1.0G"
    assert fmt.size(int(1023.4 * MIB)) == "1023 MiB"
    assert fmt.size(1023) == "1023 B"
