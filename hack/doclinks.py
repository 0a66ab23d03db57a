#!/usr/bin/env python3
"""Checks every relative link of README.md and docs/*.md: the file exists,
and a #fragment names a heading of its target (GitHub's anchors).

    python3 hack/doclinks.py        # from the repository root; exit 1 on a broken link

Links to http(s) and mailto are not followed. Code blocks and inline code
are skipped, as GitHub does not render links there.
"""
import glob
import os
import re
import sys

LINK = re.compile(r'!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+"[^"]*")?\)')
HEADING = re.compile(r'^(#{1,6})\s+(.*?)\s*#*\s*$')


def strip_code(text):
    """The text without fenced blocks, indented blocks and inline code."""
    out, fence = [], False
    for line in text.split('\n'):
        if line.lstrip().startswith('```'):
            fence = not fence
            out.append('')
            continue
        if fence or line.startswith('    ') or line.startswith('\t'):
            out.append('')
            continue
        out.append(re.sub(r'`[^`]*`', '', line))
    return '\n'.join(out)


def slug(title):
    """GitHub's anchor of a heading."""
    t = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', title)  # links: their text
    t = re.sub(r'<[^>]+>', '', t).strip().lower()
    t = re.sub(r'[^\w\- ]', '', t)  # drops punctuation, keeps letters of any script
    return t.replace(' ', '-')


def anchors(path):
    seen, out = {}, set()
    fence = False
    for line in open(path, encoding='utf-8').read().split('\n'):
        if line.lstrip().startswith('```'):
            fence = not fence
            continue
        m = None if fence else HEADING.match(line)
        if not m:
            continue
        s = slug(m.group(2))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f'{s}-{n}')
    for m in re.finditer(r'<a (?:name|id)="([^"]+)"', open(path, encoding='utf-8').read()):
        out.add(m.group(1))
    return out


def main():
    files = ['README.md'] + sorted(glob.glob('docs/*.md'))
    bad, count = 0, 0
    for f in files:
        text = strip_code(open(f, encoding='utf-8').read())
        for lineno, line in enumerate(text.split('\n'), 1):
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r'^[a-z]+:', target):
                    continue
                count += 1
                path, _, frag = target.partition('#')
                dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
                if not os.path.exists(dest):
                    print(f'{f}:{lineno}: {target}: no such file {dest}')
                    bad += 1
                    continue
                if frag and dest.endswith('.md') and frag not in anchors(dest):
                    print(f'{f}:{lineno}: {target}: no heading #{frag} in {dest}')
                    bad += 1
    print(f'{count} relative links in {len(files)} files, {bad} broken')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
