"""The JSON Schema ``format`` keywords ZapFormat enforces, as regular expressions over the decoded
string (they are compiled like an anchored ``pattern`` and intersected with it and with the length
bounds).

Each regex is written here from the format's RFC, in the strict-syntax reading that the peers'
JSON-Schema front-ends also take (outlines-core's ``FormatType``, xgrammar's and llguidance's
format regexes: syntax only, no calendar arithmetic):

* ``date`` / ``time`` / ``date-time``: RFC 3339 section 5.6 (``full-date``, ``full-time`` with its
  required offset, ``date-time``); ``T`` / ``Z`` in either case, a leap second ``60`` allowed;
  assumed: no check that the day exists in its month (as the peers).
* ``email``: RFC 5322 section 3.4.1 ``addr-spec`` with a ``dot-atom`` local part and a domain of
  RFC 1034 host labels (at most 63 characters each); quoted local parts and address literals are
  not produced.
* ``uuid``: RFC 4122 section 3, hex digits in either case.
* ``ipv4``: RFC 2673 dotted quad, each part 0-255 without leading zeros.
* ``ipv6``: RFC 4291 section 2.2 text forms (``::`` compression, an embedded IPv4 tail), written
  from RFC 3986's ``IPv6address`` ABNF; no zone index.
* ``uri``: RFC 3986 ``URI`` (``scheme ":" hier-part ["?" query] ["#" fragment]``) over its
  character classes (``pchar``, percent-encoding, ``[`` ``]`` in the authority for IP literals);
  assumed: the authority's inner structure is not checked beyond its characters.

Every string these regexes admit passes Python's own parsers where it has one (``ipaddress``,
``uuid``, ``datetime.fromisoformat``); ``tests/decoding/test_formats.py`` checks that on samples.
"""

from __future__ import annotations

__all__ = ["FORMATS", "format_regex"]

_DATE = r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
_TIME = r"([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = rf"{_OCTET}(\.{_OCTET}){{3}}"
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~\-]"
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9\-]{0,61}[A-Za-z0-9])?"
_HEX = "[0-9A-Fa-f]"


def _ipv6() -> str:
    """RFC 3986's ``IPv6address``: nine alternatives by where ``::`` stands."""
    h16, ls32 = f"{_HEX}{{1,4}}", f"({_HEX}{{1,4}}:{_HEX}{{1,4}}|{_IPV4})"

    def head(k: int) -> str:  # [ *k( h16 ":" ) h16 ]
        return "" if k < 0 else f"(({h16}:){{0,{k}}}{h16})?" if k else f"({h16})?"

    alts = [f"({h16}:){{6}}{ls32}", f"::({h16}:){{5}}{ls32}", f"{head(0)}::({h16}:){{4}}{ls32}",
            f"{head(1)}::({h16}:){{3}}{ls32}", f"{head(2)}::({h16}:){{2}}{ls32}", f"{head(3)}::{h16}:{ls32}",
            f"{head(4)}::{ls32}", f"{head(5)}::{h16}", f"{head(6)}::"]
    return "(" + "|".join(f"({a})" for a in alts) + ")"


_PCHAR = r"([A-Za-z0-9\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})"

FORMATS: dict[str, str] = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f"{_DATE}[Tt]{_TIME}",
    "email": rf"{_ATEXT}+(\.{_ATEXT}+)*@{_LABEL}(\.{_LABEL})*",
    "uuid": f"{_HEX}{{8}}-({_HEX}{{4}}-){{3}}{_HEX}{{12}}",
    "ipv4": _IPV4,
    "ipv6": _ipv6(),
    "uri": rf"[A-Za-z][A-Za-z0-9+.\-]*:({_PCHAR}|[/\[\]])*(\?({_PCHAR}|[/?])*)?(#({_PCHAR}|[/?])*)?",
}


def format_regex(name, path: str = "#") -> str:
    """The anchored regex of ``format`` ``name``; ``ValueError`` naming it if unsupported."""
    if not isinstance(name, str) or name not in FORMATS:
        raise ValueError(f"{path}: format {name!r} is not supported; supported: {sorted(FORMATS)}")
    return f"^({FORMATS[name]})$"
