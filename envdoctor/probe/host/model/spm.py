# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# A sentencepiece tokenizer.model, read with a few lines of protobuf wire-format parsing
# (no sentencepiece or protobuf package) and reduced like a tokenizer.json: the pieces are
# the vocabulary (id = position), control and user-defined pieces are the tokens
# transformers adds as special, and the trainer spec names bos/eos/unk/pad.

from envdoctor.probe.host.core import read_regular
from envdoctor.probe.host.model.tokenizer import summarize_vocab

#: A tokenizer.model above this is not parsed (Llama 2's is 0.5 MB, Gemma's 4 MB).
MODEL_MAX_SPM_BYTES = 64 * 1024 * 1024
#: sentencepiece_model.proto: ModelProto.pieces = 1, .trainer_spec = 2; SentencePiece.piece = 1,
#: .type = 3 (CONTROL = 3, USER_DEFINED = 4); TrainerSpec.model_type = 3 (UNIGRAM = 1, BPE = 2),
#: unk/bos/eos/pad_id = 40..43, unk/bos/eos/pad_piece = 45..48.
SPM_MODEL_TYPES = {1: "Unigram", 2: "BPE", 3: "WordLevel", 4: "Char"}
SPM_ROLE_FIELDS = {40: "unk_id", 41: "bos_id", 42: "eos_id", 43: "pad_id",
                   45: "unk_piece", 46: "bos_piece", 47: "eos_piece", 48: "pad_piece"}


def pb_varint(buf, i, end):
    value = 0
    shift = 0
    while True:
        if i >= end or shift > 63:
            raise ValueError("truncated varint")
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7


def pb_fields(buf, start, end):
    """(field number, wire type, value) of one message; value is an int, or (start, end) of bytes."""
    i = start
    while i < end:
        key, i = pb_varint(buf, i, end)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = pb_varint(buf, i, end)
        elif wire == 1 or wire == 5:
            size = 8 if wire == 1 else 4
            value, i = (i, i + size), i + size
        elif wire == 2:
            size, i = pb_varint(buf, i, end)
            value, i = (i, i + size), i + size
        else:
            raise ValueError("unsupported wire type %d" % wire)
        if i > end:
            raise ValueError("a field runs past the end of its message")
        yield number, wire, value


def signed(value):
    """A protobuf int32 written as a varint: negative numbers come as 64-bit two's complement."""
    return value - (1 << 64) if value >= 1 << 63 else value


def reduce_sentencepiece(path, wanted):
    """What the controller needs of a sentencepiece model, like reduce_tokenizer_json's answer."""
    try:
        buf = bytearray(read_regular(path, MODEL_MAX_SPM_BYTES))
    except OSError as exc:
        return {"error": "cannot read tokenizer.model: %s" % (exc.strerror or exc)}
    vocab = {}
    added = []
    spec = {}
    model_type = None
    count = 0
    try:
        for number, wire, value in pb_fields(buf, 0, len(buf)):
            if number == 1 and wire == 2:
                piece, kind = None, 1
                for inner, inner_wire, inner_value in pb_fields(buf, value[0], value[1]):
                    if inner == 1 and inner_wire == 2:
                        piece = bytes(buf[inner_value[0]:inner_value[1]]).decode("utf-8")
                    elif inner == 3 and inner_wire == 0:
                        kind = inner_value
                if piece is None:
                    raise ValueError("a piece has no text")
                vocab.setdefault(piece, count)  # the id is the position among the pieces
                if kind in (3, 4):
                    added.append([count, piece, kind == 3])
                count += 1
            elif number == 2 and wire == 2:
                for inner, inner_wire, inner_value in pb_fields(buf, value[0], value[1]):
                    if inner == 3 and inner_wire == 0:
                        model_type = SPM_MODEL_TYPES.get(inner_value)
                    elif inner in SPM_ROLE_FIELDS and inner_wire == 0:
                        spec[SPM_ROLE_FIELDS[inner]] = signed(inner_value)
                    elif inner in SPM_ROLE_FIELDS and inner_wire == 2:
                        spec[SPM_ROLE_FIELDS[inner]] = bytes(buf[inner_value[0]:inner_value[1]]).decode("utf-8")
    except (ValueError, UnicodeDecodeError) as exc:
        return {"error": "tokenizer.model is not a sentencepiece model: %s" % exc}
    if not count:
        return {"error": "tokenizer.model has no pieces"}
    result = summarize_vocab(vocab, added, wanted)
    # A repeated piece keeps its first id, but every position is an id of the model.
    result["vocab_count"] = count
    result["gaps"] = []
    result.update(model_type=model_type, byte_level=False, unk_token=None, padding_pad_token=None,
                  source="tokenizer.model", spm=spec)
    return result
