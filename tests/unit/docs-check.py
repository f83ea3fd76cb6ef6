#!/usr/bin/env python3
"""docs-check: every `ckptsync ...` / `ckptsyncd ...` command shown in a
shell example of README.md and docs/*.md names a command and options that
the program's own --help lists (a renamed option or a removed command
fails here, not in a user's terminal).

usage: docs-check.py SOURCE_DIR CKPTSYNC CKPTSYNCD
Shell examples are fenced blocks tagged sh/bash/console or untagged;
`# comments` are ignored; only words after the program name up to a pipe,
`;`, `&&`, `||`, `>` or `#` count.  Also: every configuration key of
syncd/base/config.c's table appears, in its section, in
deploy/ckptsync.conf.example (commented or not), and every section is
named in docs/configuration.md.  Prints each problem with file:line;
exit 1 if any."""
import glob, os, re, shlex, subprocess, sys

top, cli, daemon = sys.argv[1:4]
GLOBAL = {'--config', '--state', '--json', '-q', '--quiet', '-h', '--help', '--version'}


def help_text(argv):
    p = subprocess.run(argv, capture_output=True, text=True)
    return p.stdout + p.stderr


top_help = help_text([cli, '--help'])
commands = set(re.findall(r'(?m)^  ([a-z][a-z-]+)\b', top_help))
daemon_help = help_text([daemon, '--help'])
cache = {}


def options_of(cmd):
    if cmd not in cache:
        cache[cmd] = set(re.findall(r'(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z])\b', help_text([cli, cmd, '--help'])))
    return cache[cmd]


def words(line):
    line = re.split(r'\s(?:\||;|&&|\|\||#|>|2>|<)\s?', ' ' + line + ' ')[0]
    try:
        return shlex.split(line, comments=True)
    except ValueError:
        return line.split()


def check_line(path, n, line, bad):
    for m in re.finditer(r'(?:^|[\s$(`])(ckptsyncd?)\s+(.*)', line):
        prog, rest = m.group(1), m.group(2)
        w = words(rest)
        if prog == 'ckptsyncd':
            for x in w:
                if x.startswith('-') and x.split('=')[0] not in re.findall(r'--?[a-zA-Z][a-z-]*', daemon_help):
                    bad.append('%s:%d: ckptsyncd has no option %s' % (path, n, x))
            continue
        cmd = None
        for i, x in enumerate(w):
            if x.startswith('-'):
                continue
            if i > 0 and w[i - 1] in ('--config', '--state'):
                continue
            cmd = x
            break
        if cmd is None or cmd.startswith('$') or cmd.upper() == cmd:
            continue
        if cmd not in commands:
            bad.append('%s:%d: `ckptsync %s`: not a command in ckptsync --help' % (path, n, cmd))
            continue
        opts = options_of(cmd) | GLOBAL
        for x in w:
            if x.startswith('--') and x.split('=')[0] not in opts:
                bad.append('%s:%d: `ckptsync %s %s`: not in `ckptsync %s --help`' % (path, n, cmd, x, cmd))


bad = []
checked = 0
files = [os.path.join(top, 'README.md')] + sorted(glob.glob(os.path.join(top, 'docs', '*.md')))
for path in files:
    rel = os.path.relpath(path, top)
    fence = None
    for n, line in enumerate(open(path, encoding='utf-8'), 1):
        s = line.rstrip('\n')
        if s.startswith('```'):
            fence = None if fence is not None else (s[3:].strip() or 'plain')
            continue
        if fence in ('sh', 'bash', 'console', 'plain') and re.search(r'\bckptsyncd?\s', s):
            before = len(bad)
            check_line(rel, n, s.lstrip('$ '), bad)
            checked += 1


def check_settings(bad):
    """Every key of config.c's table in the example, every section in the docs."""
    src = open(os.path.join(top, 'syncd', 'base', 'config.c'), encoding='utf-8').read()
    keys = re.findall(r'\{SEC_([A-Z]+), "([a-z0-9_]+)"', src)
    shown, sec = set(), None
    example = os.path.join(top, 'deploy', 'ckptsync.conf.example')
    for line in open(example, encoding='utf-8'):
        m = re.match(r'\s*;?\s*\[([a-z]+)[.\]]', line)
        if m:
            sec = m.group(1)
            continue
        m = re.match(r'\s*;?\s*([a-z0-9_]+)\s*=', line)
        if m and sec:
            shown.add((sec, m.group(1)))
    conf = open(os.path.join(top, 'docs', 'configuration.md'), encoding='utf-8').read()
    for sec, key in keys:
        sec = sec.lower()
        if (sec, key) not in shown:
            bad.append('deploy/ckptsync.conf.example: [%s] %s is not shown' % (sec, key))
    for sec in sorted({k[0].lower() for k in keys}):
        if not re.search(r'\[%s[.\]]' % sec, conf):
            bad.append('docs/configuration.md: section [%s] is not described' % sec)
    return len(keys)


nkeys = check_settings(bad)
for b in bad:
    print(b)
print('docs: %d command lines checked in %d files, %d settings, %d problem(s)' %
      (checked, len(files), nkeys, len(bad)))
sys.exit(1 if bad else 0)
