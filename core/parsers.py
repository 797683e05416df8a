"""The API's JSON parser: DRF's, with a bound on how deep a body may nest (core.digests.MAX_JSON_DEPTH),
and no lone UTF-16 surrogate in any string.

Its own module: REST_FRAMEWORK's settings import it while DRF itself is still loading.
"""

from __future__ import annotations

import json
from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError

from core.digests import MAX_JSON_DEPTH, json_depth_over


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, with a bound on nesting: a body deeper than MAX_JSON_DEPTH is a 400."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            data = None
            deep = True
        else:
            deep = json_depth_over(data)
        if deep:
            raise ParseError(f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels")
        try:
            json.dumps(data, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            # "\ud800" alone is valid JSON but no text: PostgreSQL, the logs and the error body itself
            # (a choice field echoes the value) cannot take it: the connection would drop with no
            # answer, a 500 without DEBUG.
            raise ParseError(
                "JSON parse error - a string holds a lone UTF-16 surrogate (\\ud800-\\udfff)"
            ) from None
        return data
