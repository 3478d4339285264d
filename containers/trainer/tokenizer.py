"""The built-in byte-level tokenizer (``model.tokenizer == "byte"``): no files, the same ids on every machine."""

from __future__ import annotations

from dataclasses import dataclass

SPECIAL = 3  # ids 0..2 are pad, bos, eos; byte b is id b + 3


@dataclass(frozen=True)
class ByteTokenizer:
    pad_token_id: int = 0
    bos_token_id: int = 1
    eos_token_id: int = 2
    vocab_size: int = 256 + SPECIAL

    def encode(self, text: str, *, bos: bool = True, eos: bool = False) -> list[int]:
        ids = [b + SPECIAL for b in text.encode("utf-8")]
        return ([self.bos_token_id] if bos else []) + ids + ([self.eos_token_id] if eos else [])

    def decode(self, ids: list[int]) -> str:
        data = bytes(i - SPECIAL for i in ids if SPECIAL <= i < 256 + SPECIAL)
        return data.decode("utf-8", errors="replace")


class HubTokenizer:
    """A tokenizer saved next to the weights (``model.tokenizer`` is a local/S3 path): wraps transformers."""

    def __init__(self, path: str):
        from transformers import AutoTokenizer

        self._tok = AutoTokenizer.from_pretrained(path)
        self.pad_token_id = self._tok.pad_token_id if self._tok.pad_token_id is not None else self._tok.eos_token_id
        self.bos_token_id = self._tok.bos_token_id
        self.eos_token_id = self._tok.eos_token_id
        self.vocab_size = len(self._tok)

    def encode(self, text: str, *, bos: bool = True, eos: bool = False) -> list[int]:
        ids = list(self._tok.encode(text, add_special_tokens=False))
        if bos and self.bos_token_id is not None:
            ids = [self.bos_token_id, *ids]
        if eos and self.eos_token_id is not None:
            ids.append(self.eos_token_id)
        return ids

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids, skip_special_tokens=True))
