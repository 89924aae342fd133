#!/usr/bin/env python3
"""Link check of the documentation book (Python 3.11 standard library only).

    python3 .ci/linkcheck.py BOOK_HTML_DIR [DOCS_DIR | --docs DOCS_DIR]

1. The built HTML (`mdbook build docs -d BOOK_HTML_DIR`): every relative `href` and `src` of every
   page must name a file that exists, and a `#fragment` an element with that `id` (or `name`) in
   the target page (or in the same page for a bare `#fragment`). Skipped: URLs with a scheme
   (`http:`, `https:`, `mailto:`, ...), absolute paths (`/...`), an empty `#`, and relative links
   that leave the book (checked in their Markdown below, since mdBook rewrites their `.md` to
   `.html`).
2. The Markdown sources (DOCS_DIR, default: `docs/` beside this script's folder): every relative
   link that leaves the book (`../examples/...`) must name a file or folder that exists, relative
   to the `.md` file; a `#fragment` on such a `.md` target must match one of its headings (as
   GitHub makes heading anchors). The same for every relative link of the README.md beside
   DOCS_DIR (the repository's, which links into the book). Links inside code spans and code
   blocks are not links.

Prints each broken link as `page.html: href` (or `docs/page.md: target`), then a summary line;
exits 1 if any is broken, 2 on bad usage.
"""
from __future__ import annotations

import html.parser
import os
import re
import sys
import urllib.parse
from pathlib import Path

SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")


class Page(html.parser.HTMLParser):
    """The links (href/src) and the anchors (id/name) of one HTML page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.ids: set[str] = set()
        self.base: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name in ("id", "name") and tag != "meta":
                self.ids.add(value)
            elif name in ("href", "src"):
                if tag == "base" and name == "href":
                    self.base = value
                else:
                    self.links.append(value)

    handle_startendtag = handle_starttag


def parse(path: Path, cache: dict[Path, Page]) -> Page:
    page = cache.get(path)
    if page is None:
        page = Page()
        page.feed(path.read_text(encoding="utf-8", errors="replace"))
        page.close()
        cache[path] = page
    return page


def inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


def check_html(book: Path) -> list[str]:
    broken: list[str] = []
    cache: dict[Path, Page] = {}
    pages = sorted(p for p in book.rglob("*.html") if p.is_file())
    for page_path in pages:
        page = parse(page_path, cache)
        rel_page = page_path.relative_to(book).as_posix()
        # A <base href> changes what relative links resolve against (mdBook's 404 page).
        base_dir = page_path.parent
        if page.base is not None:
            if SCHEME.match(page.base) or page.base.startswith("//"):
                continue  # resolved against a site we do not have
            if page.base.startswith("/"):
                base_dir = book / page.base.lstrip("/")
            else:
                base_dir = (page_path.parent / page.base).resolve()
            if not page.base.endswith("/"):
                base_dir = base_dir.parent
        for href in page.links:
            if not href or href == "#" or SCHEME.match(href) or href.startswith("/"):
                continue
            target, _, fragment = href.partition("#")
            target = target.partition("?")[0]
            fragment = urllib.parse.unquote(fragment)
            if target:
                dest = (base_dir / urllib.parse.unquote(target)).resolve()
                if not inside(dest, book.resolve()):
                    continue  # leaves the book: its Markdown link is checked instead
                if dest.is_dir():
                    dest = dest / "index.html"
                if not dest.is_file():
                    broken.append(f"{rel_page}: {href}")
                    continue
            else:
                dest = page_path
            if fragment and dest.suffix == ".html":
                if fragment not in parse(dest, cache).ids:
                    broken.append(f"{rel_page}: {href}")
    return broken


# --- Markdown sources ---------------------------------------------------------------------

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")


def outside_fences(lines):
    """(number, line) of the lines outside fenced code blocks."""
    fence: str | None = None
    for number, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        yield number, line


def prose_lines(text: str) -> list[tuple[int, str]]:
    """Lines outside fenced code blocks, with inline code spans blanked out."""
    return [(number, CODE_SPAN.sub(lambda s: " " * len(s.group(0)), line))
            for number, line in outside_fences(text.splitlines())]


def github_slugs(md: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file."""
    slugs: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in outside_fences(md.read_text(encoding="utf-8", errors="replace").splitlines()):
        h = HEADING.match(line)
        if not h:
            continue
        text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", h.group(1))  # links → their text
        text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
        slug = re.sub(r"[^\w\- ]", "", text.lower(), flags=re.UNICODE).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        slugs.add(slug if n == 0 else f"{slug}-{n}")
    return slugs


def check_links(md: Path, shown: Path, book: Path | None) -> list[str]:
    """The relative links of one Markdown file; those into `book` are left to the HTML check."""
    broken: list[str] = []
    rel = md.resolve().relative_to(shown).as_posix()
    text = md.read_text(encoding="utf-8", errors="replace")
    for number, line in prose_lines(text):
        targets = [m.group(1) for m in INLINE_LINK.finditer(line)]
        ref = REF_DEF.match(line)
        if ref:
            targets.append(ref.group(1))
        for target in targets:
            if not target or target.startswith("#") or SCHEME.match(target) or target.startswith("/"):
                continue
            path, _, fragment = target.partition("#")
            path = urllib.parse.unquote(path.partition("?")[0])
            dest = (md.parent / path).resolve()
            if book is not None and inside(dest, book):
                continue  # inside the book: the HTML check covers it
            if not dest.exists():
                broken.append(f"{rel}:{number}: {target}")
            elif fragment and dest.is_file() and dest.suffix == ".md":
                if urllib.parse.unquote(fragment).lower() not in github_slugs(dest):
                    broken.append(f"{rel}:{number}: {target}")
    return broken


def check_markdown(docs: Path) -> list[str]:
    """Links leaving the book from docs/**.md, and every relative link of the README beside it."""
    root = docs.resolve()
    shown = root.parent
    broken: list[str] = []
    for md in sorted(docs.rglob("*.md")):
        broken += check_links(md, shown, root)
    readme = shown / "README.md"
    if readme.is_file():
        broken += check_links(readme, shown, None)
    return broken


def main(argv: list[str]) -> int:
    args = argv[1:]
    docs = Path(__file__).resolve().parent.parent / "docs"
    if "--docs" in args:
        i = args.index("--docs")
        if i + 1 >= len(args):
            print(__doc__, file=sys.stderr)
            return 2
        docs = Path(args[i + 1])
        del args[i : i + 2]
    if len(args) == 2 and not args[1].startswith("-"):
        docs = Path(args.pop())
    if len(args) != 1 or args[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    book = Path(args[0])
    if not (book / "index.html").is_file():
        print(f"linkcheck: {book} has no index.html: build the book first", file=sys.stderr)
        return 2
    if not docs.is_dir():
        print(f"linkcheck: no docs folder at {docs}", file=sys.stderr)
        return 2
    broken = check_html(book) + check_markdown(docs)
    for b in broken:
        print(b)
    pages = sum(1 for _ in book.rglob("*.html"))
    sources = sum(1 for _ in docs.rglob("*.md"))
    print(
        f"linkcheck: {len(broken)} broken link(s) in {pages} HTML pages and {sources} Markdown files",
        file=sys.stderr,
    )
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
