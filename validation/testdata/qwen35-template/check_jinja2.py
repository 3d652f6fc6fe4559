#!/usr/bin/env python3
"""Renders chat_template.jinja with Jinja2, configured as transformers'
apply_chat_template configures it, over the conversations of the JSON
lines on standard input ({"messages": ..., "tools": ..., ...}, each the
input of `tarfa template`), and prints each rendering as a JSON string on
its own line (or {"error": ...}), to be compared with `tarfa template`."""
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "chat_template.jinja")) as f:
    tpl = env.from_string(f.read())
for line in sys.stdin:
    if not line.strip():
        continue
    try:
        print(json.dumps(tpl.render(**json.loads(line))))
    except jinja2.exceptions.TemplateError as e:
        print(json.dumps({"error": str(e)}))
