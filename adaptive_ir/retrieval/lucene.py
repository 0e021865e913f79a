"""Lucene's English analysis, as Anserini's default analyzer (``DefaultEnglishAnalyzer``) chains it: StandardTokenizer
(UAX#29 word rules, tokens of at most 255 characters), EnglishPossessiveFilter, LowerCaseFilter, StopFilter (the
analyzer's 33 words) and PorterStemFilter.

* **Tokens.** ``StandardTokenizerImpl.jflex`` (Lucene 9) is a longest-match scanner: at each position it takes the
  longest word (letters and digits joined by UAX#29's rules WB5-WB13b, ``Format``/``Extend``/``ZWJ`` characters
  absorbed), emoji sequence, run of South East Asian letters, or single Han/Hiragana character, and otherwise skips
  one character. ``_full_pattern`` is that grammar as one Python regular expression, its character classes read from
  the Unicode properties of the ``regex`` package (greedy backtracking finds the longest match here: every
  optional part is tried longest first and the grammar never needs a shorter part to go further). It is slow (about
  1 MB/s: classes with characters above U+FFFF are scanned range by range), so a document with none of the
  characters that need the full grammar (see ``_special_class``) takes ``_fast_pattern`` instead: a run of letters,
  digits and connectors (``_``), where a MidLetter (``.``, ``'``, ``:``) may join two letters and a MidNum (``.``,
  ``,``, ``;``, ``'``) two digits (about 18 MB/s). The PyPI ``regex`` package's own ``\\b`` under its WORD flag is
  not the same segmentation (it joins a quote to the word after it, ``'word`` is one segment) and was not used.
  Checked against Lucene 9.9.1 (Anserini 0.38.0) on every document and query of SciFact, NFCorpus, Cranfield and
  CISI: identical token lists (``tests/test_lucene.py`` keeps a sample).
* **Possessives and case.** ``'s`` (or ``’s``, ``＇s``) is cut from the end of a token before it is lower-cased, and
  lower-casing maps each character alone, as Java's ``Character.toLowerCase`` does (no final sigma, ``İ`` → ``i``).
* **Stemming.** ``porter.py``: Lucene's ``PorterStemmer.java``, compiled.
"""

from __future__ import annotations

import functools
import re

MAX_TOKEN_LENGTH = 255
"""StandardTokenizer's default maxTokenLength: a longer word is cut into pieces of this length."""

_QUOTES = "'\u2019\uff07"  # the apostrophes EnglishPossessiveFilter recognises


@functools.cache
def _code_points() -> str:
    return "".join(map(chr, (*range(0xD800), *range(0xE000, 0x110000))))


@functools.cache
def _cls(prop: str, bmp_only: bool = False) -> str:
    """The code points of a ``regex`` property expression (e.g. ``[\\p{WB=ALetter}\\p{WB=Hebrew_Letter}]``) as the
    body of a ``re`` character class."""
    import regex  # only this analyzer needs it

    text = _code_points()[:0xF800] if bmp_only else _code_points()
    out = []
    for m in regex.finditer(prop + "+", text, flags=regex.V1):
        a, b = m.group()[0], m.group()[-1]
        out.append(re.escape(a) if a == b else f"{re.escape(a)}-{re.escape(b)}")
    return "".join(out)


_AHLETTER = r"[\p{WB=ALetter}\p{WB=Hebrew_Letter}]"
_NUMERIC = r"[\p{WB=Numeric}[\p{Block=HalfwidthAndFullwidthForms}&&\p{Nd}]]"
_EXTEND_NUM_LET = r"\p{WB=ExtendNumLet}"
_MID_LETTER = r"[\p{WB=MidLetter}\p{WB=MidNumLet}\p{WB=Single_Quote}]"
_MID_NUM = r"[\p{WB=MidNum}\p{WB=MidNumLet}\p{WB=Single_Quote}]"


@functools.cache
def _full_pattern() -> re.Pattern:
    """StandardTokenizerImpl.jflex's token rules (WORD ⊇ NUMERIC ⊇ HANGUL/KATAKANA's texts, EMOJI, SOUTH_EAST_ASIAN,
    IDEOGRAPHIC, HIRAGANA), in that grammar's notation: ``X_ex`` is X followed by any Format/Extend/ZWJ (WB4)."""
    efz = "[" + _cls(r"[\p{WB=Format}\p{WB=Extend}\p{WB=ZWJ}]") + "]*"
    efz_sans_sel = "[" + _cls(r"[[\p{WB=Format}\p{WB=Extend}\p{WB=ZWJ}]--[\uFE0E\uFE0F]]") + "]*"

    def ex(prop: str) -> str:
        return f"[{_cls(prop)}]{efz}"

    ahl, heb, num, kat = ex(_AHLETTER), ex(r"\p{WB=Hebrew_Letter}"), ex(_NUMERIC), ex(r"\p{WB=Katakana}")
    mid_letter, mid_num, enl = ex(_MID_LETTER), ex(_MID_NUM), ex(_EXTEND_NUM_LET)
    sq, dq = ex(r"\p{WB=Single_Quote}"), ex(r"\p{WB=Double_Quote}")
    # WB7a-c (a Hebrew letter then ' or "+Hebrew letter) are tried inside the letter run, after the longer joins:
    # as a separate alternative the run would first swallow the letter before the quote and stop short
    heb_char = _cls(r"\p{WB=Hebrew_Letter}")
    core = (f"(?:{kat}(?:(?:{enl})*{kat})*"
            f"|(?:{num}(?:(?:{enl})*{num}|{mid_num}{num})*"
            f"|{ahl}(?:(?:{enl})*{ahl}|{mid_letter}{ahl}|(?<=[{heb_char}]){dq}{heb}|(?<=[{heb_char}]){sq})*)+)")
    word = f"(?:{enl})*{core}(?:(?:{enl})+{core})*(?:{enl})*"
    # Emoji: Extended_Pictographic, or Emoji minus regional indicators, keycap bases, ©®™〰〽 and modifiers
    emoji_char = _cls(r"[\p{Extended_Pictographic}[\p{Emoji}--[\p{WB=Regional_Indicator}0-9#*©®™\u3030\u303D"
                      r"\p{Emoji_Modifier}]]]")
    base, modifier = _cls(r"\p{Emoji_Modifier_Base}"), _cls(r"\p{Emoji_Modifier}")
    zwj = "\u200d"
    element = (f"(?:{zwj}*[{emoji_char}]{efz_sans_sel}\ufe0f?"
               f"|(?:{zwj}*[{base}]{efz_sans_sel})?[{modifier}]{efz_sans_sel})")
    ri = ex(r"\p{WB=Regional_Indicator}")
    # an element's trailing Format/Extend/ZWJ may already hold the joining ZWJ: then the next element follows it
    emoji = (f"{element}(?:(?:{zwj}{element}|(?<={zwj}){element})*|[\U000E0020-\U000E007E]+\U000E007F)"
             f"|[0-9#*]{efz_sans_sel}\ufe0f?\u20e3{efz_sans_sel}|{ri}{ri}")
    south_east_asian = "(?:" + ex(r"\p{Line_Break=Complex_Context}") + ")+"
    han, hiragana = ex(r"\p{Script=Han}"), ex(r"\p{Script=Hiragana}")
    return re.compile(f"{word}|{emoji}|{south_east_asian}|{han}|{hiragana}")


@functools.cache
def _fast_pattern() -> re.Pattern:
    """The word rule for text without the characters of ``_special_class`` (BMP classes: matched at C speed)."""
    a, n = _cls(_AHLETTER, True), _cls(_NUMERIC, True)
    e, ml, mn = _cls(_EXTEND_NUM_LET, True), _cls(_MID_LETTER, True), _cls(_MID_NUM, True)
    return re.compile(f"[{a}{n}{e}]+(?:(?:(?<=[{a}])[{ml}](?=[{a}])|(?<=[{n}])[{mn}](?=[{n}]))[{a}{n}{e}]+)*")


@functools.cache
def _special_class() -> re.Pattern:
    """Characters after which only the full grammar is right: WB4's ignorables, Hebrew and Katakana (their own
    rules), regional indicators, Han, Hiragana, South East Asian letters, emoji, and anything above U+FFFF. The
    double quote is not among them: it joins only after a Hebrew letter (WB7b-c), which is (a quote in English
    text sent 8 % of a Wikipedia corpus's documents to the slow grammar)."""
    return re.compile("[" + _cls(
        r"[[\p{WB=Format}\p{WB=Extend}\p{WB=ZWJ}\p{WB=Hebrew_Letter}\p{WB=Katakana}"
        r"\p{WB=Regional_Indicator}\p{Script=Han}\p{Script=Hiragana}\p{Line_Break=Complex_Context}"
        r"\p{Extended_Pictographic}\p{Emoji}]--[0-9#*]]", True) + "\U00010000-\U0010ffff]")


def standard_tokens(text: str) -> list[str]:
    """StandardTokenizer's tokens of ``text`` (original case). Words made of connectors alone (``__``) come out too:
    ``normalize`` drops them, as the tokenizer never emits them."""
    if text.isascii() or not _special_class().search(text):
        tokens = _fast_pattern().findall(text)
    else:
        tokens = _full_pattern().findall(text)
    if max(map(len, tokens), default=0) > MAX_TOKEN_LENGTH:
        tokens = [piece for t in tokens for piece in _pieces(t)]
    return tokens


def _pieces(token: str) -> list[str]:
    """A word longer than MAX_TOKEN_LENGTH as the tokenizer emits it: the first MAX_TOKEN_LENGTH characters, then
    the tokens of the rest (its 255-character buffer ends the match there and scanning resumes after it)."""
    if len(token) <= MAX_TOKEN_LENGTH:
        return [token]
    return [token[:MAX_TOKEN_LENGTH], *standard_tokens(token[MAX_TOKEN_LENGTH:])]


@functools.cache
def _connectors_only() -> re.Pattern:
    return re.compile(f"[{_cls(_EXTEND_NUM_LET)}]*")


def normalize(token: str) -> str:
    """EnglishPossessiveFilter then LowerCaseFilter; "" for a word of connectors alone (never a Lucene token)."""
    if len(token) >= 2 and token[-2] in _QUOTES and token[-1] in "sS":
        token = token[:-2]
    if token.isascii():
        return "" if token.strip("_") == "" else token.lower()
    if _connectors_only().fullmatch(token):
        return ""
    # Java lower-cases one code point at a time (str.lower would apply final sigma and give İ two characters)
    return "".join("i" if c == "\u0130" else c.lower() for c in token)
