"""STATUS.ERROR codes and their names: the hardware's enums are built from these.

A layer the controller refuses before any bus traffic ends with one :class:`AccelError` code.
Failures after the layer started carry a class in the high nibble and the detail in the low
bits: ``ERROR_DMA_BUS | DmaError`` (a bus error response or a DMA refusal) and
``ERROR_ENGINE | code`` (an engine refused a tile: the backward engine's :class:`BPError`, 0
for the forward engine) and ``ERROR_PROGRAM | ProgramError`` (a malformed instruction or
program, :mod:`bpsa.spec.isa`).
"""

import enum

__all__ = ["AccelError", "BPError", "DmaError", "ERROR_DMA_BUS", "ERROR_ENGINE", "ERROR_PROGRAM",
           "ProgramError", "error_name"]

#: High nibble of STATUS.ERROR for a DMA failure after the layer started.
ERROR_DMA_BUS = 0x10
#: High nibble of STATUS.ERROR for an engine's refusal of a tile.
ERROR_ENGINE = 0x20
#: High nibble of STATUS.ERROR for a malformed instruction or program.
ERROR_PROGRAM = 0x30


class AccelError(enum.IntEnum):
    """Refusals checked before the layer starts, in the order the controller checks them."""
    NONE = 0
    PHASE = 1               #: unknown phase, or a phase whose engine / dataflow is not generated
    ZERO_SIZE = 2           #: N, C, H, W, K, R or S is 0
    ZERO_STEP = 3           #: a stride or a dilation is 0
    KERNEL_TOO_LARGE = 4    #: the dilated kernel is larger than the padded input
    DIM = 5                 #: OH or OW wider than ``dim_width``
    TOO_LARGE = 6           #: not even one row band fits the buffers
    ALIGN = 7               #: an address is not a multiple of its element size
    WINDOW = 8              #: a tensor is not inside the DMA window
    SHAPE = 9               #: FC backward with H, W, R or S not 1, or padding
    MODE = 10               #: a backward mode (MODE) not generated for the phase
    REQUANT = 11            #: REQUANT on a phase other than the forward, the zero-free loss
                            #: and pooling
    POOL = 12               #: a pooling kind not generated, a dilation not 1, padding above
                            #: kernel // 2, or a window larger than the averaging divides
    RELU = 13               #: RELU on a phase other than the forward and pooling


class DmaError(enum.IntEnum):
    """How a DMA command ended."""
    NONE = 0
    SLVERR = 1
    DECERR = 2
    WINDOW = 3
    ALIGN = 4
    BUFFER = 5


class BPError(enum.IntEnum):
    """The backward engine's refusal of a tile (its ``error_code``).

    ``ZERO_SIZE``: a shape field (n, c, h, w, k, r, s, oh, ow) is 0. ``ZERO_STEP``: a stride
    or dilation is 0. ``KERNEL_TOO_LARGE``: the dilated kernel ``d(R-1)+1`` is larger than the
    padded input. ``SHAPE_MISMATCH``: ``oh`` / ``ow`` is not the forward output size
    ``(H + p + p_bottom - d(R-1) - 1) // s + 1`` (``W + 2p`` across). ``A_OVERFLOW`` /
    ``B_OVERFLOW``: the compact tensor read through stream ``a`` / ``b`` has more elements
    than buffer A / B has words. ``NOT_GENERATED``: the phase needs a dataflow the
    configuration does not generate.
    """
    NONE = 0
    ZERO_SIZE = 1
    ZERO_STEP = 2
    KERNEL_TOO_LARGE = 3
    SHAPE_MISMATCH = 4
    A_OVERFLOW = 5
    B_OVERFLOW = 6
    NOT_GENERATED = 7


class ProgramError(enum.IntEnum):
    """Why the instruction dispatcher stopped a program (:mod:`bpsa.spec.isa`)."""
    NONE = 0
    OPCODE = 1      #: not an opcode of :class:`bpsa.spec.isa.Opcode`
    RESERVED = 2    #: reserved bits set (a field or value where the opcode takes none)
    FIELD = 3       #: SET of a field index past the table
    RANGE = 4       #: SET of a value wider than its field
    ORDER = 5       #: SAVE, SAVE2 or END with no RUN since the last STEP; RUN before any STEP
    END = 6         #: the program's words ran out before END


def error_name(code):
    """A readable name of a STATUS.ERROR value (``"TOO_LARGE"``, ``"DMA_BUS:WINDOW"``,
    ``"ENGINE:3"``: the engine's code, 0 for the forward engine; ``"PROGRAM:RANGE"``)."""
    if 0 < code < 0x10 and code in AccelError._value2member_map_:
        return AccelError(code).name
    if code & 0xF0 == ERROR_DMA_BUS:
        low = code & 0xF
        return f"DMA_BUS:{DmaError(low).name if low in DmaError._value2member_map_ else low}"
    if code & 0xF0 == ERROR_ENGINE:
        return f"ENGINE:{code & 0xF}"
    if code & 0xF0 == ERROR_PROGRAM:
        low = code & 0xF
        return (f"PROGRAM:"
                f"{ProgramError(low).name if low in ProgramError._value2member_map_ else low}")
    return f"UNKNOWN:{code:#x}"
