"""The API's JSON parser: DRF's, with a bound on how deep a body may nest (core.digests.MAX_JSON_DEPTH).

Its own module: REST_FRAMEWORK's settings import it while DRF itself is still loading.
"""

from __future__ import annotations

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
        return data
