"""Lucene's ``PorterStemmer`` (Martin Porter's reference implementation, release 3), compiled.

A word is a run of code points in a ``uint32`` buffer; ``k`` is its last index and ``j`` a cut point, as in
``PorterStemmer.java``, whose methods the functions below follow one by one (``cons``, ``m``, ``vowelinstem``,
``doublec``, ``cvc``, ``ends``, ``setto``, ``r``, ``step1`` … ``step6``). A stem is never longer than its word, so
``porter_stems`` stems a whole vocabulary in one call, in place, and decodes the results with one string operation:
about 0.2 µs a word where the interpreted port took 12 µs (a 1M-word vocabulary is stemmed in a fraction of a
second). Snowball's ``porter`` and ``english`` stemmers are other algorithms (Snowball maps "abli" to "able" where
Lucene maps "bli" to "ble", and has no "logi" → "log" step): ``tests/test_lucene.py`` holds words where they differ,
with Lucene's own stems.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_A, _E, _I, _O, _U, _Y = 97, 101, 105, 111, 117, 121


@njit(cache=True, inline="always")
def _cons(b, i):
    """Whether b[i] is a consonant: not a vowel, and a 'y' only at the start or after a vowel (``cons`` is
    recursive in Java: a run of y's alternates)."""
    flip = False
    while True:
        ch = b[i]
        if ch == _A or ch == _E or ch == _I or ch == _O or ch == _U:
            return flip
        if ch != _Y or i == 0:
            return not flip
        flip = not flip
        i -= 1


@njit(cache=True)
def _m(b, j):
    """The number of consonant sequences between 0 and j: [C](VC)^m[V], counting the VC pairs."""
    n, i = 0, 0
    while i <= j and _cons(b, i):
        i += 1
    while i <= j:
        while i <= j and not _cons(b, i):
            i += 1
        if i > j:
            return n
        n += 1
        while i <= j and _cons(b, i):
            i += 1
    return n


@njit(cache=True)
def _vowelinstem(b, j):
    for i in range(j + 1):
        if not _cons(b, i):
            return True
    return False


@njit(cache=True)
def _doublec(b, j):
    return j >= 1 and b[j] == b[j - 1] and _cons(b, j)


@njit(cache=True)
def _cvc(b, i):
    if i < 2 or not _cons(b, i) or _cons(b, i - 1) or not _cons(b, i - 2):
        return False
    ch = b[i]
    return ch != 119 and ch != 120 and ch != _Y  # w, x, y


@njit(cache=True)
def _ends(b, k, s):
    """Whether b[0..k] ends with ``s`` (then j = k − len(s) is where it starts, less one)."""
    n = len(s)
    o = k - n + 1
    if o < 0:
        return False
    for i in range(n):
        if b[o + i] != ord(s[i]):
            return False
    return True


@njit(cache=True)
def _setto(b, j, s):
    """b[j+1 ..] = s; the new k."""
    for i in range(len(s)):
        b[j + 1 + i] = ord(s[i])
    return j + len(s)


@njit(cache=True)
def _step1(b, k):
    """Plurals, -ed and -ing."""
    if b[k] == 115:  # s
        if _ends(b, k, "sses"):
            k -= 2
        elif _ends(b, k, "ies"):
            k = _setto(b, k - 3, "i")
        elif b[k - 1] != 115:
            k -= 1
    if _ends(b, k, "eed"):
        if _m(b, k - 3) > 0:
            k -= 1
        return k
    j = -2
    if _ends(b, k, "ed"):
        j = k - 2
    elif _ends(b, k, "ing"):
        j = k - 3
    if j == -2 or not _vowelinstem(b, j):
        return k
    k = j
    if _ends(b, k, "at"):
        k = _setto(b, k - 2, "ate")
    elif _ends(b, k, "bl"):
        k = _setto(b, k - 2, "ble")
    elif _ends(b, k, "iz"):
        k = _setto(b, k - 2, "ize")
    elif _doublec(b, k):
        ch = b[k]
        if not (ch == 108 or ch == 115 or ch == 122):  # l, s, z stay doubled
            k -= 1
    elif _m(b, k) == 1 and _cvc(b, k):
        k = _setto(b, k, "e")
    return k


@njit(cache=True)
def _replace_first(b, k, rules):
    """Steps 3 and 4: the first (suffix, replacement) of ``rules`` the word ends with is replaced if m() > 0; the
    later ones are not tried. The new k."""
    for suffix, repl in rules:
        if _ends(b, k, suffix):
            j = k - len(suffix)
            return _setto(b, j, repl) if _m(b, j) > 0 else k
    return k


@njit(cache=True)
def _step3(b, k):
    """Double suffixes to single ones (-ization → -ize, ...), by the penultimate letter."""
    if k == 0:
        return k
    c = b[k - 1]
    if c == _A:
        return _replace_first(b, k, (("ational", "ate"), ("tional", "tion")))
    if c == 99:  # c
        return _replace_first(b, k, (("enci", "ence"), ("anci", "ance")))
    if c == _E:
        return _replace_first(b, k, (("izer", "ize"),))
    if c == 108:  # l
        return _replace_first(b, k, (("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous")))
    if c == _O:
        return _replace_first(b, k, (("ization", "ize"), ("ation", "ate"), ("ator", "ate")))
    if c == 115:  # s
        return _replace_first(b, k, (("alism", "al"), ("iveness", "ive"), ("fulness", "ful"), ("ousness", "ous")))
    if c == 116:  # t
        return _replace_first(b, k, (("aliti", "al"), ("iviti", "ive"), ("biliti", "ble")))
    if c == 103:  # g
        return _replace_first(b, k, (("logi", "log"),))
    return k


@njit(cache=True)
def _step4(b, k):
    """-ic-, -full, -ness etc., by the last letter."""
    c = b[k]
    if c == _E:
        return _replace_first(b, k, (("icate", "ic"), ("ative", ""), ("alize", "al")))
    if c == _I:
        return _replace_first(b, k, (("iciti", "ic"),))
    if c == 108:  # l
        return _replace_first(b, k, (("ical", "ic"), ("ful", "")))
    if c == 115:  # s
        return _replace_first(b, k, (("ness", ""),))
    return k


@njit(cache=True)
def _step5_suffix(b, k):
    """The length of the step-5 suffix b[0..k] ends with (0: none), the penultimate letter choosing the list."""
    c = b[k - 1]
    if c == _A:
        return 2 if _ends(b, k, "al") else 0
    if c == 99:  # c
        return 4 if _ends(b, k, "ance") or _ends(b, k, "ence") else 0
    if c == _E:
        return 2 if _ends(b, k, "er") else 0
    if c == _I:
        return 2 if _ends(b, k, "ic") else 0
    if c == 108:  # l
        return 4 if _ends(b, k, "able") or _ends(b, k, "ible") else 0
    if c == 110:  # n
        if _ends(b, k, "ant"):
            return 3
        if _ends(b, k, "ement"):
            return 5
        if _ends(b, k, "ment"):
            return 4
        return 3 if _ends(b, k, "ent") else 0
    if c == _O:
        if _ends(b, k, "ion") and k >= 3 and (b[k - 3] == 115 or b[k - 3] == 116):  # -sion, -tion
            return 3
        return 2 if _ends(b, k, "ou") else 0
    if c == 115:  # s
        return 3 if _ends(b, k, "ism") else 0
    if c == 116:  # t
        return 3 if _ends(b, k, "ate") or _ends(b, k, "iti") else 0
    if c == _U:
        return 3 if _ends(b, k, "ous") else 0
    if c == 118:  # v
        return 3 if _ends(b, k, "ive") else 0
    if c == 122:  # z
        return 3 if _ends(b, k, "ize") else 0
    return 0


@njit(cache=True)
def _step5(b, k):
    """-ant, -ence etc. in context <c>vcvc<v>."""
    if k == 0:
        return k
    n = _step5_suffix(b, k)
    if n and _m(b, k - n) > 1:
        k -= n
    return k


@njit(cache=True)
def _step6(b, k):
    """A final -e if m() > 1, and -ll to -l (both measure m() up to the word's end before the -e goes)."""
    j = k
    if b[k] == _E:
        a = _m(b, j)
        if a > 1 or (a == 1 and not _cvc(b, k - 1)):
            k -= 1
    if b[k] == 108 and _doublec(b, k) and _m(b, j) > 1:
        k -= 1
    return k


@njit(cache=True)
def _stem_words(buf, starts, lengths):
    """Stem every word in place: word w is ``buf[starts[w]:starts[w] + lengths[w]]``; its stem's length is written
    to ``lengths[w]`` (words of up to 2 code points are left alone)."""
    for w in range(len(starts)):
        n = lengths[w]
        if n <= 2:
            continue
        b = buf[starts[w]:starts[w] + n]
        k = _step1(b, n - 1)
        if k > 0 and b[k] == _Y and _vowelinstem(b, k - 1):  # step 2: terminal y to i after a vowel in the stem
            b[k] = _I
        k = _step3(b, k)
        k = _step4(b, k)
        k = _step5(b, k)
        lengths[w] = _step6(b, k) + 1


def porter_stems(words: list[str]) -> list[str]:
    """Lucene's Porter stem of every word (lower-cased words, as PorterStemFilter receives them)."""
    if not words:
        return []
    lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    starts = np.zeros(len(words), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    buf = np.frombuffer("".join(words).encode("utf-32-le"), dtype=np.uint32).copy()
    _stem_words(buf, starts, lengths)
    # the stems, each a prefix of its (rewritten) slot, gathered into one string and cut at their lengths
    keep = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths) + np.arange(lengths.sum())
    text = buf[keep].tobytes().decode("utf-32-le")
    ends = np.cumsum(lengths).tolist()
    return [text[a:b] for a, b in zip([0, *ends[:-1]], ends)]


def porter_stem(word: str) -> str:
    """Lucene's Porter stem of one word (``porter_stems``)."""
    return porter_stems([word])[0]
