"""Comma-separated list flags shared by the CLI subcommands (precompile, bench):
one parser, so that every `--op`-like flag accepts and rejects the same way."""


def split_list(text):
    """'a, b,,c' -> ['a', 'b', 'c']; None or '' -> []."""
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def subset(text, valid, flag, noun, error):
    """The members of `valid` named in `text` (or all of them for 'all'), in
    `valid`'s order; raises `error` naming `flag` for an unknown or empty list."""
    values = split_list(text)
    if values == ["all"]:
        return tuple(valid)
    unknown = [v for v in values if v not in valid]
    if unknown or not values:
        what = f"unknown {noun} {unknown[0]!r}" if unknown else "empty"
        raise error(f"{flag}: {what} (expected any of {', '.join(valid)}, or all)")
    return tuple(v for v in valid if v in values)
