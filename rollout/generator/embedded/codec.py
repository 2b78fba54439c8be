"""Text in and out of the served model, as every route family needs it.

The tokenizer is optional (a model folder without one serves `input_ids` only), so the
routes never touch it directly: encoding text without one is a 400, decoding gives "".
"""

from __future__ import annotations

from typing import List, Optional

from .errors import BadRequest
from .protocol import ParsedGenerate
from .request import Request

PREFIX_MARGIN = 16  # tokens a cut can merge away at a prefix's end


class TextCodec:
    def __init__(self, tokenizer=None):
        self.tokenizer = tokenizer

    def encode(self, text: str) -> List[int]:
        if self.tokenizer is None:
            raise BadRequest("text: this model has no tokenizer; send input_ids")
        return self.tokenizer.encode(text, add_special_tokens=False)

    def encode_within(self, text: str, max_tokens: int) -> Optional[List[int]]:
        """`encode(text)`, or None as soon as a prefix of it holds more than `max_tokens` tokens:
        prefixes of 8, 16, 32, ... characters per allowed token are tokenised in turn (natural
        text has 3-6 per token, so a prompt that fits is tokenised once), so a text far over the
        limit costs at most about 8 characters' tokens per allowed token, whatever its length
        (bytes per token vary from 1 to dozens: no byte count bounds tokens). A prefix can split
        a word or a merge at its cut, so it must exceed the limit by a margin to count."""
        size = 8 * max(max_tokens, 1)
        while size < len(text):
            if len(self.encode(text[:size])) > max_tokens + PREFIX_MARGIN:
                return None
            size *= 2
        return self.encode(text)

    def decode(
        self, ids: List[int], skip_special_tokens: bool = True, spaces_between_special_tokens: bool = True
    ) -> str:
        """As SGLang's detokenizer: Hugging Face's decode with both options (a slow tokenizer puts
        spaces around special tokens unless told not to; a fast one decodes them as its decoder
        does, with either value, exactly as it does under SGLang)."""
        if self.tokenizer is None:
            return ""
        return self.tokenizer.decode(
            ids, skip_special_tokens=skip_special_tokens, spaces_between_special_tokens=spaces_between_special_tokens
        )

    def token_text(self, token: int) -> str:
        return self.decode([token], False)

    def output_text(self, item: ParsedGenerate, req: Request) -> str:
        """The output text without the stop token or string that ended it (unless no_stop_trim),
        as SGLang's detokenizer trims it; `output_ids` keep the token."""
        matched = (req.finish or {}).get("matched")
        ids = req.output_ids
        if isinstance(matched, int) and not isinstance(matched, bool) and not item.spec.no_stop_trim and ids:
            ids = ids[:-1]
        text = self.decode(ids, item.spec.skip_special_tokens, item.spec.spaces_between_special_tokens)
        if isinstance(matched, str) and not item.spec.no_stop_trim and matched in text:
            text = text[: text.index(matched)]
        return text
