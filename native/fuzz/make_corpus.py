#!/usr/bin/env python3
"""Writes the seed corpus of sam3d_fuzz_capi (native/fuzz/corpus/) and the inputs of its
findings (native/fuzz/findings/, regression seeds now): small hand-written operation sequences.

The fuzz target's input decoder (decode.cpp) reads an input with FuzzedDataProvider, one byte
per choice, taken from the END of the input: a choice in [0, n) is byte % n. So an input is its
list of choices, reversed. The choices, in the order decode.cpp reads them:

    input    ordinary(2) seed(256: also bit 1 a duplex deferred world, bit 0 its second queue first) op...
    op       0 run CALL | 1, 2 submit FLAGS CALL | 3 reserve N NULL_SLOTS(16: 0 = NULL) SIZE(28)...
             | 4 wait TICKET | 5 release TICKET | 6 (0 arm a compute failure | 1 reset counters
             | 2 add area AREA | 3 remove area AREA)(4) | 7 scribble AT(256: byte 3*AT) LEN(128)
    AREA     tensor(16): 0-11 the tensor choice, 12-15 raw, mat, raw_view, mat_rows
    FLAGS    flags(16: ZERO_COPY 1 | QUEUED 2 | KEEP_SLOTS 4 | SLOT_TAILS 8) unknown(16: 0 = or in
             16 << SHIFT(4)) ticket_null(8: 0 = NULL)
    CALL     graph(2) synchronous(8: 0 = yes) n_uploads(5) n_downloads(4) nulls(32: 0 uploads
             NULL, 1 downloads NULL) DESC...
    DESC     tensor(16: 0-11 a tensor choice) HOST offset(8: 4 = PICK(nbytes+1), 5 = nbytes,
             6 = nbytes+1+PICK(4), 7 = SIZE_MAX-PICK(8), else 0) SIZE
             | tensor(16: 12-15 FOLLOW) HOST SIZE (no offset: FOLLOW sets it)
    SIZE     (8: 3 = 1+PICK(rest), 4 = 0, 5 = rest+1, 6 = SIZE_MAX-PICK(8), 7 = 4+4*PICK(4), else rest)
    FOLLOW   the device byte where the previous descriptor of the array ends, plus a gap: 12 none,
             13 to the next slot (when the previous descriptor's host memory is the start of a slot
             of the current reservation, not its last, the bytes from its end to the next slot in
             the staged world; else none), 14 GAP(16) 4*(1+GAP), 15 GAP(64) 1+GAP; then WHICH(4):
             of the tensors holding that byte (a, b, out, raw, mat, raw_view, mat_rows, late_view,
             in that order), the WHICH-th mod their number. Without a previous valid descriptor or
             such a tensor: the tensor choice (12-15) - 12, and its offset follows as in DESC
    HOST     kind(16): 0 NULL; zero-copy 2-5 with a reservation: slot(4) (5: 4 bytes inside it);
             zero-copy 6-7 with another live slot set: set(8) slot(4) (7: AT(64), 4*AT bytes in);
             8-15 with a previous descriptor in the array: MIRROR (read nothing); else (8-15:
             kind - 8) the arena: AT(256), byte 3*AT
    MIRROR   as far after the previous descriptor's host memory as this one's device range after
             its device range: the arena (byte 0 when that passes its end), the same slot of a
             set other than the current reservation, or the current reservation's next slot
    TICKET   (10): 0-7 the k-th ticket handed out (mod their number), 8 ticket 0, 9 unknown

Run from anywhere: python3 native/fuzz/make_corpus.py [OUT_FOLDER] (default: next to this file).
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent

# Tensor choices (worlds.h, TensorId) and their ggml_nbytes.
A, B, OUT, RAW, MAT, RAW_VIEW, MAT_ROWS, TRANSPOSED, STRIDED, LATE_VIEW, UNALLOCATED, NULL_TENSOR = range(12)
# Slot sizes (decode.cpp, kSlotSizes) by index.
(
    S1,
    S2,
    S7,
    S16,
    S31,
    S32,
    S33,
    S48,
    S63,
    S64,
    S65,
    S96,
    S100,
    S128,
    S200,
    S256,
    S512,
    S1000,
    S4K,
    S8K,
    S1M,
    S31M,
    SBOUND,
    SBOUND1,
    S0,
    SMAX,
    SMAX31,
    SHALF,
) = range(28)
ZC, Q, K, T = 1, 2, 4, 8  # SAM3D_SUBMIT_ZERO_COPY, _QUEUED, _KEEP_SLOTS, _SLOT_TAILS


def arena(at3):
    """Host pointer into the arena at byte 3 * at3."""
    return [1, at3]


def slot(j, inside=False):
    """Host pointer: slot j of the current reservation (or 4 bytes inside it)."""
    return [5 if inside else 2, j]


def kept(set_index, j, at4=None):
    """Host pointer into slot j of the set_index-th live set other than the current reservation."""
    return [6, set_index, j] if at4 is None else [7, set_index, j, at4]


NULL = [0]
MIRROR = [8]


NEXT_SLOT = "next slot"


def follow(host, gap=0, which=0, size=None):
    """A descriptor that starts `gap` bytes after the previous one of its array ends (0..64, or
    NEXT_SLOT: as far as the next slot of the current reservation lies after the end of the
    previous descriptor in its slot), in the which-th tensor holding that byte; size None: the
    rest."""
    if gap == NEXT_SLOT:
        head = [13]
    elif gap == 0:
        head = [12]
    elif gap % 4 == 0:
        assert 4 <= gap <= 64, gap
        head = [14, gap // 4 - 1]
    else:
        assert 1 <= gap <= 64, gap
        head = [15, gap - 1]
    return [*head, which, *host, *(size or [0])]


def desc(tensor, host, offset=None, size=None):
    """A descriptor; offset/size None mean 0 and the rest of the tensor."""
    return [tensor, *host, *(offset or [0]), *(size or [0])]


def call(ups=(), downs=(), graph=False, synchronous=False, nulls=2):
    out = [1 if graph else 0, 0 if synchronous else 1, len(ups), len(downs), nulls]
    for d in (*ups, *downs):
        out += d
    return out


def run(c):
    return [0, *c]


def submit(flags, c, unknown_shift=None, ticket_null=False):
    return [
        1,
        flags,
        1 if unknown_shift is None else 0,
        *([] if unknown_shift is None else [unknown_shift]),
        0 if ticket_null else 1,
        *c,
    ]


def reserve(*sizes, null_slots=False):
    return [3, len(sizes), 0 if null_slots else 1, *sizes]


def wait(k):
    return [4, k]


def release(k):
    return [5, k]


ARM = [6, 0]
RESET = [6, 1]


def add_area(tensor):
    return [6, 2, tensor]


def remove_area(tensor):
    return [6, 3, tensor]


def scribble(at3, n):
    return [7, at3, n]


def encode(*ops, ordinary=0, seed=7):
    choices = [ordinary, seed]
    for op in ops:
        choices += op
    assert all(0 <= c < 256 for c in choices), choices
    return bytes(reversed(choices))


# The workload: out = 2 * a + b, a at arena byte 0, b at 72, out into 150.
SCALE_ADD = dict(ups=[desc(A, arena(0)), desc(B, arena(24))], downs=[desc(OUT, arena(50))], graph=True)
# The same, out into byte 300 (so it can be queued while the first is in flight).
SCALE_ADD_2 = dict(ups=[desc(A, arena(0)), desc(B, arena(24))], downs=[desc(OUT, arena(100))], graph=True)
# The same through slots 0, 1 (inputs) and 2 (output) of the current reservation.
SCALE_ADD_SLOTS = dict(ups=[desc(A, slot(0)), desc(B, slot(1))], downs=[desc(OUT, slot(2))], graph=True)

CORPUS = {
    "run-scale-add": encode(
        run(call(**SCALE_ADD)),
        run(call(**SCALE_ADD, synchronous=True)),
        run(call(ups=[desc(RAW_VIEW, arena(100))], downs=[desc(RAW, arena(200))])),
    ),
    "queued-copying": encode(
        submit(Q, call(**SCALE_ADD)), scribble(0, 60), submit(Q, call(**SCALE_ADD_2)), wait(1), wait(0), wait(0)
    ),
    "zero-copy": encode(
        reserve(S64, S64, S64),
        submit(ZC, call(**SCALE_ADD_SLOTS)),
        reserve(S64, S64, S64),
        submit(ZC | Q, call(**SCALE_ADD_SLOTS)),
        wait(0),
    ),
    "kept-chain": encode(
        reserve(S64, S64, S64),
        submit(ZC | Q | K, call(**SCALE_ADD_SLOTS)),
        wait(0),
        reserve(S64, S64),
        submit(ZC, call(ups=[desc(A, kept(0, 2)), desc(B, slot(0))], downs=[desc(OUT, slot(1))], graph=True)),
        release(0),
        reserve(S32),
    ),
    "compute-failure": encode(
        ARM,
        submit(Q, call(**SCALE_ADD)),
        wait(0),
        ARM,
        run(call(**SCALE_ADD)),
        reserve(S64, S64, S64),
        ARM,
        submit(ZC, call(**SCALE_ADD_SLOTS)),
    ),
    "malformed": encode(
        run(call(ups=[desc(NULL_TENSOR, arena(0))])),
        run(call(ups=[desc(A, NULL)])),
        run(call(ups=[desc(UNALLOCATED, arena(0))])),
        run(call(ups=[desc(TRANSPOSED, arena(0))], downs=[desc(STRIDED, arena(100))])),
        run(call(ups=[desc(A, arena(0), offset=[5])])),
        run(call(ups=[desc(A, arena(0), offset=[7, 0], size=[6, 0])])),
        run(call(ups=[desc(A, arena(0))], nulls=0)),
        run(call(ups=[desc(RAW, arena(0)), desc(RAW_VIEW, arena(40))])),
        run(call(downs=[desc(A, arena(0)), desc(B, arena(10))])),
        submit(ZC, call(ups=[desc(A, arena(0))])),
        submit(Q, call(**SCALE_ADD), ticket_null=True),
        submit(K, call(**SCALE_ADD)),
        submit(0, call(**SCALE_ADD), unknown_shift=2),
        wait(8),
        wait(9),
        release(9),
        reserve(),
        reserve(S0),
        reserve(SMAX),
        reserve(SHALF, SHALF),
        reserve(S64, null_slots=True),
    ),
    "ring-full": encode(
        reserve(SBOUND),
        submit(Q, call(**SCALE_ADD)),
        run(call(**SCALE_ADD)),
        wait(0),
        reserve(S31M, S1M),
        submit(ZC | Q, call(ups=[desc(A, slot(1))])),
        submit(Q, call(**SCALE_ADD_2)),
        RESET,
        wait(1),
        wait(2),
        reserve(SBOUND1),
        submit(ZC, call(ups=[desc(A, slot(0))])),
    ),
    # Rule 10: a and b back to back (one run of two), downloads of out and of raw's two halves
    # (one run), the same zero-copy from adjacent slots (and from slots in the other order: two
    # runs), and queued.
    "coalesced-runs": encode(
        run(call(ups=[desc(A, arena(0)), follow(MIRROR)], downs=[desc(OUT, arena(50))], graph=True)),
        run(
            call(
                ups=[desc(RAW, arena(0), size=[7, 3]), follow(MIRROR, size=[7, 3])],
                downs=[desc(RAW, arena(100), size=[7, 3]), follow(MIRROR), desc(A, arena(200))],
            )
        ),
        reserve(S64, S64, S64),
        submit(ZC, call(ups=[desc(A, slot(0)), follow(MIRROR)], downs=[desc(OUT, slot(2))], graph=True)),
        reserve(S64, S64, S64),
        submit(ZC | Q, call(ups=[desc(A, slot(0)), follow(MIRROR)], downs=[desc(OUT, slot(2))], graph=True)),
        wait(0),
        reserve(S64, S64, S64),
        submit(ZC, call(ups=[desc(A, slot(1)), follow(slot(0))], downs=[desc(OUT, slot(2))], graph=True)),
        submit(
            Q,
            call(
                ups=[desc(RAW, arena(0), size=[7, 3]), follow(MIRROR, size=[7, 3])],
                downs=[desc(A, arena(100)), follow(MIRROR)],
            ),
        ),
        wait(1),
    ),
    # Rule 10's areas: gaps bridged inside raw (uploads, and a copying call's downloads), an
    # area's refusals (not contiguous, overlapping, not declared), a transposed view removing
    # mat's area by its bytes, zero-copy uploads from slots as far apart as on the device (the
    # same downloads fill their 16-byte slots: they bridge the padding between them), and no gap
    # bridged once raw's area is removed.
    "area-gaps": encode(
        add_area(RAW),
        run(
            call(
                ups=[desc(RAW, arena(0), size=[7, 3]), follow(MIRROR, gap=16, size=[7, 3])],
                downs=[desc(MAT, arena(100))],
            )
        ),
        run(call(downs=[desc(RAW, arena(0), size=[7, 3]), follow(MIRROR, gap=16, size=[7, 3])])),
        add_area(RAW_VIEW),
        add_area(TRANSPOSED),
        remove_area(MAT),
        add_area(MAT),
        remove_area(TRANSPOSED),
        add_area(MAT_ROWS),
        reserve(S16, S16, S16),
        submit(ZC, call(ups=[desc(MAT_ROWS, slot(0), size=[7, 3]), follow(MIRROR, gap=16, size=[7, 3])])),
        reserve(S16, S16, S16),
        submit(ZC, call(downs=[desc(MAT_ROWS, slot(0), size=[7, 3]), follow(MIRROR, gap=16, size=[7, 3])])),
        remove_area(RAW),
        run(call(ups=[desc(RAW, arena(0), size=[7, 3]), follow(MIRROR, gap=16, size=[7, 3])])),
    ),
    # Rule 10's zero-copy downloads across a gap of raw's area, into 32-byte slots (32 apart in the
    # staged world's staging): 16 bytes into slot 0, 16 bytes 16 further on the device into slot 1
    # bridge slot 0's tail with SAM3D_SUBMIT_SLOT_TAILS only (also queued, and kept: a later call
    # reads the whole kept slot, tail included); 16 bytes into slot 0 and into slot 2, as far apart
    # on the host as on the device, never (slot 1 lies between); 20 bytes into a 48-byte slot, then
    # the next slot (64 further on both): slot 0's tail and the padding after it, with the flag;
    # 31 bytes filling a 31-byte slot, then 1 byte further: bridged without the flag (the byte is
    # padding); SLOT_TAILS without ZERO_COPY refused, alone and after the other flag errors.
    "slot-tails": encode(
        add_area(RAW),
        reserve(S32, S32, S32),
        submit(ZC | T, call(downs=[desc(RAW, slot(0), size=[7, 3]), follow(MIRROR, gap=16, size=[7, 3])])),
        reserve(S32, S32, S32),
        submit(ZC, call(downs=[desc(RAW, slot(0), size=[7, 3]), follow(MIRROR, gap=16, size=[7, 3])])),
        reserve(S32, S32, S32),
        submit(
            ZC | Q | T,
            call(
                ups=[desc(A, slot(2), size=[7, 3])],
                downs=[desc(RAW, slot(0), size=[7, 3]), follow(MIRROR, gap=16, size=[7, 3])],
            ),
        ),
        wait(0),
        reserve(S32, S32, S32),
        submit(ZC | T, call(downs=[desc(RAW, slot(0), size=[7, 3]), follow(slot(2), gap=48, size=[7, 3])])),
        reserve(S48, S48),
        submit(ZC | T, call(downs=[desc(RAW, slot(0), size=[3, 19]), follow(MIRROR, gap=NEXT_SLOT, size=[7, 3])])),
        reserve(S31, S31),
        submit(ZC, call(downs=[desc(RAW, slot(0), size=[3, 30]), follow(MIRROR, gap=1, size=[7, 3])])),
        submit(T, call(**SCALE_ADD)),
        submit(Q | T, call(**SCALE_ADD)),
        submit(Q | T, call(**SCALE_ADD), ticket_null=True),
        submit(K | T, call(**SCALE_ADD)),
        submit(T, call(**SCALE_ADD), unknown_shift=0),
        reserve(S32, S32, S32),
        submit(ZC | K | T, call(downs=[desc(RAW, slot(0), size=[7, 3]), follow(MIRROR, gap=16, size=[7, 3])])),
        reserve(S64),
        submit(ZC, call(ups=[desc(RAW, kept(0, 0), size=[3, 31])])),
        release(1),
    ),
    # A6 in the deferred world (its transfer queue runs an upload as soon as the event it waits
    # for allows): three queued calls, the third uploading other bytes into a, which the second's
    # graph reads; the third's uploads wait for the second's event, the newest outstanding one.
    "queued-order": encode(
        submit(Q, call(**SCALE_ADD)),
        submit(Q, call(**SCALE_ADD_2)),
        submit(Q, call(ups=[desc(A, arena(200))])),
        wait(0),
        wait(1),
        wait(2),
    ),
    # Rule 1: a queued call naming a view without a buffer of its own, refused where the session
    # would batch it, taken (and waited) by batching off and the static fallback.
    "late-view-queued": encode(
        submit(Q, call(ups=[desc(LATE_VIEW, arena(0))], downs=[desc(LATE_VIEW, arena(100))])), wait(0)
    ),
    # A3: tickets waited out of order (in the deferred world the second's wait completes the
    # first through its event, and the first is still waited after), each once, while a later
    # one is still in flight.
    "waited-once": encode(
        submit(Q, call(**SCALE_ADD)),
        submit(Q, call(**SCALE_ADD_2)),
        submit(Q, call(ups=[desc(A, arena(200))])),
        wait(1),
        wait(0),
        wait(0),
        wait(1),
        wait(2),
    ),
    # A4: a kept call's slots read by two queued calls; the deferred world completes the first at
    # its wait (its own event), then the kept call is released: its region stays held while the
    # second reads it, through the next reservation.
    "kept-readers": encode(
        reserve(S64, S64, S64),
        submit(ZC | Q | K, call(**SCALE_ADD_SLOTS)),
        wait(0),
        reserve(S64),
        submit(ZC | Q, call(ups=[desc(A, kept(0, 0))])),
        submit(ZC | Q, call(ups=[desc(B, kept(0, 1))])),
        wait(1),
        release(0),
        reserve(S64),
        wait(2),
        reserve(S64),
    ),
    "unpinned-ordinary": encode(
        run(call(**SCALE_ADD)), reserve(S64, S64, S64), submit(ZC | Q, call(**SCALE_ADD_SLOTS)), wait(0), ordinary=1
    ),
}

# The inputs that found the core's defects (each broke an invariant before its fix): regression
# seeds, run with the corpus (the normal suite's Fuzz.capi_2000_runs too).
FINDINGS = {
    # A contiguous view made after allocation was rejected with batching off too.
    "late-view-rejected": encode(run(call(ups=[desc(LATE_VIEW, arena(0))], downs=[desc(LATE_VIEW, arena(100))]))),
    # Size one past the tensor, offset 0: the message named .offset.
    "extent-names-offset": encode(run(call(ups=[desc(A, arena(0), size=[5])]))),
    # A graph-only run counted a fallback on no_caps only.
    "transferless-fallback": encode(run(call(graph=True))),
    # A failed queued kept call stayed kept: release after the failed wait was accepted.
    "failed-queued-kept": encode(
        reserve(S64, S64, S64), ARM, submit(ZC | Q | K, call(**SCALE_ADD_SLOTS)), wait(0), release(0)
    ),
    # The staged world counted no pinned batch for the failed call, while no_caps counted its
    # fallback.
    "failed-staged-uncounted": encode(ARM, run(call(**SCALE_ADD))),
    # A reservation over the bound falls back to heap slots; kept, then read by a zero-copy
    # call, that call counted a pinned batch.
    "kept-heap-pinned": encode(
        reserve(SBOUND1),
        submit(ZC | K, call(downs=[desc(OUT, slot(0))])),
        reserve(S64),
        submit(ZC, call(ups=[desc(A, kept(0, 0))])),
    ),
    # With a reservation holding the whole ring, a run naming a view without its own buffer fell
    # back (oversized, no room) and was taken, where the same run with room was refused.
    "late-view-no-room": encode(reserve(SBOUND), run(call(ups=[desc(LATE_VIEW, arena(0))]))),
    # transfer.h lists a NULL tensor under sam3d_session_remove_area's invalid_argument; the core
    # returns null_tensor (as add does). The model takes either until the two agree.
    # A zero-copy upload mirrored 296 bytes past its predecessor 4 bytes into a slot started past
    # the slot's first kShadow bytes; the harness's fill of the caller's input ran from there to
    # "kShadow - at" (wrapped) bytes, past the heap slot's end (ASan: heap-buffer-overflow in
    # fuzz::fill). The harness was at fault, not the core.
    "mirrored-slot-past-shadow": encode(
        reserve(SBOUND), submit(ZC, call(ups=[desc(A, slot(0, inside=True)), desc(LATE_VIEW, MIRROR)]))
    ),
    # The deferred world's duplex session: a queued zero-copy kept call of a graph only (no slot),
    # waited. Its wait synchronizes
    # the second backend alone (rule 11), whose only entry is the wait for the call's handoff; the
    # deferred seam's synchronize ran that queue's ops but not the first queue's ops before the
    # event it waited for, so the graph never ran. The harness was at fault, not the core: a
    # synchronize now covers what its queue's event waits cover, as a CUDA stream's does. Seed 3:
    # a duplex deferred world, whose second queue runs first where nothing orders the two.
    "duplex-graph-only-wait": encode(submit(ZC | Q | K, call(graph=True)), wait(0), seed=3),
    "remove-area-null": encode(
        add_area(NULL_TENSOR),
        remove_area(NULL_TENSOR),
        add_area(UNALLOCATED),
        remove_area(UNALLOCATED),
        add_area(LATE_VIEW),
        remove_area(LATE_VIEW),
    ),
}


def main() -> None:
    import sys

    root = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE  # another folder: for the check in tests/
    for folder, inputs in (("corpus", CORPUS), ("findings", FINDINGS)):
        out = root / folder
        out.mkdir(parents=True, exist_ok=True)
        for name, data in inputs.items():
            (out / name).write_bytes(data)
        print(f"{out}: {len(inputs)} inputs")


if __name__ == "__main__":
    main()
