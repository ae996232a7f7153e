"""Per-ISA instruction menus the sketches choose from: which forms (with which immediates) may fill
an opcode hole in each stage. Menus are data; the sketches and CEGIS are ISA-independent."""
from __future__ import annotations

from sketches.program import Op


def ops(*names: str) -> list[Op]:
    return [Op.parse(n) for n in names]


# NEON arrangement names for a register of the given width: bytes, halfwords, words.
_NEON = {128: ("16b", "8h", "4s"), 64: ("8b", "4h", "2s")}


def bitserial(isa: str, reg_bits: int, out_reg_bits: int | None = None, row_bits: int | None = None) -> dict:
    """Menus and lane width of the bitserial stages (see synth/bitserial.py). ``out_reg_bits``: the
    width of a tile's output register (rows x output lanes) where it differs from ``reg_bits``: the
    paper's NEON D tile reduces eight 64-bit registers into eight 16-bit lanes of a Q register.
    ``row_bits``: rows packed two to a Q register, whose hybrid ``act_count`` counts one row's
    activation bits, the low D half (``vget_low``, free)."""
    if isa == "neon":
        b, h, s = _NEON[reg_bits]
        oh = _NEON[out_reg_bits or reg_bits][1]
        low_half = ["dup.1d_low_u8", "cnt.8b", "uaddlv.8b"] if row_bits == 64 else []
        return {
            "lane_bits": 8,
            "compute": ops(f"and.{b}", f"orr.{b}", f"eor.{b}", f"bic.{b}", f"mvn.{b}", f"cnt.{b}", f"add.{b}", f"sub.{b}"),
            "pair": ops(f"add.{b}", f"add.{h}", f"addp.{b}", f"addp.{h}", f"addp.{s}", f"uadalp.{h}", f"uadalp.{s}"),
            "each": ops(f"uaddlp.{h}", f"uaddlp.{s}", *(["uxtl.8h"] if reg_bits == 64 else [])),
            "accumulate": ops(f"uadalp.{h}", f"add.{h}", f"uaddlp.{h}"),
            "scale": ops(f"add.{oh}", f"sub.{oh}", f"shl.{oh}#1", f"shl.{oh}#2"),
            "act_count": ops(*low_half or [f"cnt.{b}", f"uaddlv.{b}"], f"dup.{oh}"),
        }
    if isa == "avx512":
        return {
            "lane_bits": 64,
            "compute": ops("vpandq.zmm", "vpandnq.zmm", "vporq.zmm", "vpxorq.zmm", "vpopcntq.zmm", "vpaddq.zmm", "vpsubq.zmm"),
            # transpose-and-add combinators: qword unpacks, then 128-bit chunk shuffles
            "pair": ops("vpaddq.zmm", "vpunpcklqdq.zmm", "vpunpckhqdq.zmm", "vshufi64x2.zmm#136", "vshufi64x2.zmm#221"),
            "each": ops("vpaddq.zmm"),
            "accumulate": ops("vpaddq.zmm"),
            "scale": ops("vpaddq.zmm", "vpsubq.zmm", "vpsllq.zmm#1", "vpsllq.zmm#2"),
            "act_count": ops("vpopcntq.zmm", "vpaddq.zmm", "valignq.zmm#4", "valignq.zmm#2", "valignq.zmm#1"),
        }
    if isa == "avx2":
        lut = int.from_bytes(bytes(bin(i & 15).count("1") for i in range(32)), "little")
        low4, high4 = int.from_bytes(b"\x0f" * 32, "little"), int.from_bytes(b"\xf0" * 32, "little")
        return {
            "lane_bits": 8,
            # no vector popcount: a byte's count is the counts of its two nibbles (the split is checked
            # by the stage proof), looked up in a 16-entry table by vpshufb; vpsadbw against zero widens
            "popcount_split": [low4, high4],
            "constants": {"lut": lut, "low4": low4, "zero": 0},
            "compute": ops("vpand.ymm", "vpandn.ymm", "vpshufb.ymm", "vpsrlw.ymm#4", "vpaddb.ymm"),
            "accumulate": ops("vpsadbw.ymm", "vpaddq.ymm"),
        }
    raise KeyError(f"no bitserial menus for {isa!r}; accepted: neon, avx2, avx512")


def int8(isa: str, types: str, layout: str) -> dict:
    """Menus of the int8 stages (see synth/int8.py)."""
    if isa == "neon" and layout == "k4":
        dot = {"s8s8": "sdot.4s_laneq", "u8s8": "sudot.4s_laneq", "u8u8": "udot.4s_laneq"}[types]
        return {"row": ops(*[f"{dot}#{g}" for g in range(4)])}
    if isa == "neon" and layout == "acc" and types == "s8s7":     # vget_low: the D view, no instruction
        return {"dot": ops("smull.8h", "smlal2.8h", "sadalp.4s", "dup.1d_low_s8")}
    if isa == "neon" and layout == "acc":
        return {"dot": ops("umull.8h", "uadalp.4s", "add.4s")}
    if isa == "neon" and types == "u8u8":
        return {"constants": {"zero": 0},
                "dot": ops("umull.8h", "uadalp.4s", "uaddlp.4s", "add.4s"),
                "reduce": ops("addp.4s", "add.4s")}
    if isa == "neon" and types == "s16":
        return {"constants": {"zero": 0},
                "dot": ops("smull.4s", "smlal.4s", "add.4s"),
                "reduce": ops("addp.4s", "add.4s")}
    if isa == "avx512" and types == "u8s8":
        return {"row": ops("vpdpbusd.zmm", "vpaddd.zmm")}
    if isa == "avx2" and types == "u8s8":
        return {"row": ops("vpdpbusd.ymm", "vpaddd.ymm")}
    if isa == "avx2" and types == "s8s7":
        # exact without VNNI: vpmaddubsw(|a|, sign(b, a)) multiplies a * b in pairs that cannot saturate
        # (|a b + a' b'| <= 2 * 128 * 127), vpmaddwd by ones widens them (synth/int8.py's two parts)
        return {"constants": {"ones16": int.from_bytes(b"\x01\x00" * 16, "little")}, "sign_cases": ("a",),
                "pairs": ops("vpabsb.ymm", "vpsignb.ymm", "vpmaddubsw.ymm"),
                "widen": ops("vpmaddwd.ymm", "vpaddd.ymm", "vpaddw.ymm")}
    if isa == "avx512" and types in ("w16", "s16"):   # AVX-512BW without VNNI (Skylake-SP): the AVX2 row on zmm
        return {"group": ops("vpmaddwd.zmm", "vpaddd.zmm")}
    if isa == "avx2" and types in ("w16", "s16"):
        # w16: exact for every int8 operand, both widened to int16 ahead of the kernel (B when packed at
        # compile time, A when packed at run time); s16: any int16 operands (the Winograd domain,
        # ops/winograd.py). vpmaddwd multiplies each lane's pair into int32
        return {"group": ops("vpmaddwd.ymm", "vpaddd.ymm")}
    if isa == "avx2" and types in ("u7s8", "u8r7"):      # vpmaddubsw where its pairs cannot saturate
        return {"constants": {"ones16": int.from_bytes(b"\x01\x00" * 16, "little")}, "multiplies_in_pairs": True,
                "row": ops("vpmaddubsw.ymm", "vpmaddwd.ymm", "vpaddd.ymm", "vpaddw.ymm")}
    if isa == "amx":
        return {"tile": ops("tdpbusd.m16n16k64" if types == "u8s8" else "tdpbssd.m16n16k64")}
    raise KeyError(f"no int8 menus for {isa} {types}")
