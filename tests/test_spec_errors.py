"""STATUS.ERROR codes and their names."""

from bpsa.spec.errors import (ERROR_DMA_BUS, ERROR_ENGINE, AccelError, BPError, DmaError,
                              error_name)


def test_refusal_codes_are_distinct_and_below_the_classes():
    values = [e.value for e in AccelError]
    assert values == list(range(len(values)))
    assert max(values) < ERROR_DMA_BUS < ERROR_ENGINE
    assert max(e.value for e in DmaError) < 16 and max(e.value for e in BPError) < 16


def test_error_names():
    assert error_name(6) == "TOO_LARGE"
    assert error_name(9) == "SHAPE"
    assert [error_name(e.value) for e in AccelError if e.value] == \
        [e.name for e in AccelError if e.value]
    assert error_name(ERROR_DMA_BUS | DmaError.WINDOW) == "DMA_BUS:WINDOW"
    assert error_name(ERROR_DMA_BUS | 0xF) == "DMA_BUS:15"
    assert error_name(ERROR_ENGINE | BPError.KERNEL_TOO_LARGE) == "ENGINE:3"
    assert error_name(ERROR_ENGINE) == "ENGINE:0"
    assert error_name(0x47) == "UNKNOWN:0x47"
