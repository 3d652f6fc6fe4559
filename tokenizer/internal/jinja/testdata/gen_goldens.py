#!/usr/bin/python3
"""Render the cases below with Python Jinja2, configured as transformers'
apply_chat_template configures it, and write jinja_goldens.json.

Run with Debian's interpreter, which sees python3-jinja2:
    /usr/bin/python3 gen_goldens.py > jinja_goldens.json
The Go tests only read the JSON; they never need Python.
"""
import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda f: datetime(2025, 3, 7, 14, 5, 9).strftime(f)
    return env


V = {
    "s": "Hello World",
    "n": 7, "f": 2.5, "neg": -3, "big": 12345678901234567890123,
    "l": [3, 1, 2], "words": ["b", "A", "c", "a"],
    "d": {"z": 1, "a": [1, 2.0, None, True], "m": {"k": "v\n\"q\"", "u": "é😀\u2028"}},
    "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}, {"role": "user", "content": "<tool_response>x</tool_response>"}],
    "none": None, "t": True, "empty": [], "emptys": "",
    "floats": [0.1, 1e16, 1e15, 1.0, 1e-5, 0.0001, -0.0, 123456789.125, 1.5e300, 3.0e-7],
    "text": "  line one\n\tline two  \n\nline four\r\nend  ",
}

CASES = [
    # whitespace control, trim_blocks, lstrip_blocks
    ("ws_basic", "{% if t %}\n  yes\n{% endif %}\nafter"),
    ("ws_lstrip", "a\n    {% if t %}\n    in\n    {% endif %}\nb"),
    ("ws_lstrip_var", "a\n    {{ n }}\n  {% if t %}x{% endif %}  \nb"),
    ("ws_minus", "a   {%- if t -%}   b   {%- endif -%}   c"),
    ("ws_plus", "a\n  {%+ if t %}b{% endif +%}\nc"),
    ("ws_var_minus", "a  {{- n -}}  b\n  {{ n }}\n"),
    ("ws_comment", "a\n  {# comment #}\nb {#- c -#} c\n{# x #}d"),
    ("ws_trailing_newline", "x\n"),
    ("ws_crlf", "a\r\n{% if t %}\r\nb\r\n{% endif %}\r\nc"),
    ("ws_tabs", "\t{% for i in l %}\t{{ i }}\n\t{% endfor %}\t\nend"),
    ("ws_after_var_block", "{{ n }} {% if t %}x{% endif %}\n  {% if t %}y{% endif %}"),
    ("ws_raw", "{% raw %}{{ not rendered }} {% if %}{% endraw %}\n  {% raw -%}  x  {%- endraw %}"),
    ("ws_unicode_space", "a\n\u3000{% if t %}b{% endif %}\u00a0{%- if t %}c{% endif %}"),
    ("ws_nested", "{%- for m in msgs %}\n    {%- if m.role == 'user' %}\n        {{- 'U:' + m.content }}\n    {%- else %}\n        {{- 'A:' + m.content }}\n    {%- endif %}\n{%- endfor %}\n"),
    # literals and printing
    ("print_values", "{{ none }}|{{ t }}|{{ false }}|{{ n }}|{{ f }}|{{ l }}|{{ d }}|{{ words }}|{{ (1, 'a') }}|{{ (1,) }}|{{ big }}|{{ undefined_thing }}|"),
    ("print_floats", "{% for x in floats %}{{ x }} {% endfor %}"),
    ("print_repr_strings", "{{ ['it\\'s', \"say \\\"hi\\\"\", 'both \\' \"', 'tab\\there', 'nl\\n', '\\x01', 'é', '\\u3000'] }}"),
    ("string_escapes", "{{ 'a\\tb\\\\n\\x41\\u00e9\\101\\d' }}|{{ \"dq'\" }}"),
    ("string_concat_adjacent", "{{ 'a' 'b' \"c\" }}"),
    ("numbers", "{{ 1_000 }} {{ 1.5e3 }} {{ 2e-3 }} {{ 10 / 4 }} {{ 10 // 4 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 1 + 1.5 }} {{ 3 * 'ab' }} {{ [1] * 2 }}"),
    # operators and precedence
    ("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ not true or true }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' ~ 1 ~ none ~ undefined_x }} {{ l|length - 1 }} {{ -n|abs }} {{ -(l|length) }}"),
    ("err_neg_list", "{{ -l|length }}"),
    ("in_ops", "{{ 'ell' in s }} {{ 'x' not in s }} {{ 2 in l }} {{ 'z' in d }} {{ 'q' in d }} {{ 1 in undefined_y }}"),
    ("and_or_values", "{{ 0 or 'x' }} {{ '' and 'y' }} {{ none or [] or 'z' }} {{ 1 and 2 }}"),
    ("cond_expr", "{{ 'y' if t else 'n' }} {{ 'y' if none else 'n' }} [{{ 'y' if none }}]"),
    ("equality", "{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' == 'a' }} {{ [1, 2] == [1, 2] }} {{ none == none }} {{ undefined_a == undefined_b }} {{ d == d }} {{ (1, 2) == [1, 2] }}"),
    # subscripts and slices
    ("subscripts", "{{ l[0] }} {{ l[-1] }} {{ l[5] }}|{{ s[0] }} {{ s[-1] }} {{ d['z'] }} {{ d.z }} {{ d['missing'] }}| {{ msgs[0].role }} {{ msgs[-1]['content'] }}"),
    ("slices", "{{ l[::-1] }} {{ l[1:] }} {{ l[:-1] }} {{ s[::2] }} {{ s[-5:] }} {{ s[100:] }} {{ l[::2] }} {{ msgs[::-1]|map(attribute='role')|list }} {{ l[-100:100] }} {{ s[5:1:-1] }}"),
    ("dict_methods", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{{ d.keys()|list }}|{{ d.get('z') }} {{ d.get('q') }} {{ d.get('q', 5) }}|{{ d.values()|list|length }}"),
    ("dict_items_filter", "{% for k, v in d|items %}{{ k }}:{{ v|tojson }};{% endfor %}|{% for k, v in d|dictsort %}{{ k }}{% endfor %}"),
    # str methods
    ("str_methods", "{{ s.lower() }}|{{ s.upper() }}|{{ s.title() }}|{{ 'hELLO wORLD'.capitalize() }}|{{ s.startswith('He') }}|{{ s.endswith(('x', 'ld')) }}|{{ s.replace('l', 'L') }}|{{ s.replace('l', 'L', 1) }}|{{ s.find('o') }}|{{ s.rfind('o') }}|{{ s.count('l') }}|{{ '-'.join(['a', 'b']) }}"),
    ("str_strip", "[{{ text.strip() }}]|[{{ text.lstrip() }}]|[{{ text.rstrip() }}]|[{{ 'xxaxx'.strip('x') }}]|[{{ '\\n\\nabc\\n'.lstrip('\\n') }}]|[{{ 'abc\\n\\n'.rstrip('\\n') }}]"),
    ("str_split", "{{ 'a,b,,c'.split(',') }}|{{ '  a  b c  '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ '  a  b c  '.split(None, 1) }}|{{ '  a  b c  '.rsplit(None, 1) }}|{{ text.splitlines() }}|{{ 'x</think>y</think>z'.split('</think>')[-1] }}"),
    ("str_predicates", "{{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ 'abc'.islower() }} {{ 'ABC'.isupper() }} {{ ' '.isspace() }} {{ ''.isdigit() }}"),
    ("str_format", "{{ '{} and {}'.format('a', 1) }} {{ '{0}{1}{0}'.format('x', 'y') }} {{ '{name}!'.format(name='n') }} {{ '%s=%d' % ('a', 3) }} {{ '%s'|format('q') }}"),
    # filters
    ("filters_basic", "{{ s|length }} {{ l|count }} {{ undefined_z|length }} {{ s|lower }} {{ s|upper }} {{ 'a b-c(d'|title }} {{ 'abc'|capitalize }} {{ '  x  '|trim }} {{ 'xxyxx'|trim('x') }} {{ l|first }} {{ l|last }} {{ s|first }} {{ l|join(', ') }} {{ words|join }} {{ msgs|join(',', attribute='role') }}"),
    ("filters_default", "{{ undefined_q|default('dflt') }} {{ none|default('dflt') }} {{ ''|default('dflt', true) }} {{ undefined_q|d('x') }} {{ 0|default(5, boolean=true) }}"),
    ("filters_num", "{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(9) }} {{ 3.9|int }} {{ '2.5'|float }} {{ 'q'|float }} {{ -3|abs }} {{ -2.5|abs }} {{ 2.567|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 7|round }} {{ 2.1|round(method='ceil') }} {{ '0x1F'|int(0, 16) }}"),
    ("filters_seq", "{{ l|sort }} {{ words|sort }} {{ words|sort(case_sensitive=true) }} {{ l|sort(reverse=true) }} {{ msgs|sort(attribute='role')|map(attribute='content')|list }} {{ words|unique|list }} {{ l|reverse|list }} {{ s|reverse }} {{ l|sum }} {{ l|min }} {{ l|max }} {{ words|max }} {{ l|list }} {{ 'ab'|list }} {{ d|list }}"),
    ("filters_select", "{{ l|select('odd')|list }} {{ l|reject('odd')|list }} {{ msgs|selectattr('role', 'equalto', 'user')|list|length }} {{ msgs|rejectattr('role', 'eq', 'user')|map(attribute='content')|join }} {{ [0, 1, '', 'a', none]|select|list }} {{ l|map('string')|join('-') }} {{ msgs|map(attribute='nope', default='D')|list }}"),
    ("filters_indent", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(width='>', blank=true) }}"),
    ("filters_misc", "{{ '<a href=\"x\">&\\'</a>'|e }} {{ 'x'|safe }} {{ 'one two, three'|wordcount }} {{ d|attr('z') }} {{ 5|string + 'x' }}"),
    ("tojson", "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ l|tojson(separators=(',', ':')) }}|{{ d|tojson(sort_keys=true) }}|{{ 'é😀\\u2028\\x7f'|tojson }}|{{ 'é😀\\x7f'|tojson(ensure_ascii=true) }}|{{ floats|tojson }}|{{ none|tojson }} {{ t|tojson }} {{ big|tojson }} {{ [[], {}]|tojson(indent=1) }} {{ {1: 'a', none: 'b', true: 'c'}|tojson }}"),
    # tests
    ("tests", "{{ n is defined }} {{ nope is defined }} {{ nope is undefined }} {{ none is none }} {{ n is number }} {{ t is number }} {{ f is float }} {{ n is integer }} {{ t is integer }} {{ s is string }} {{ d is mapping }} {{ l is sequence }} {{ s is sequence }} {{ d is iterable }} {{ n is odd }} {{ n is even }} {{ n is divisibleby 7 }} {{ t is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ t is boolean }} {{ n is not none }} {{ s is lower }} {{ 'ab' is lower }} {{ n is eq 7 }} {{ n is gt(3) }} {{ 2 is in(l) }} {{ none is sameas none }} {{ 'x' is filter }} {{ 'tojson' is filter }}"),
    # statements
    ("for_loop_vars", "{% for x in words %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.previtem }}/{{ loop.nextitem }}/{{ loop.cycle('o', 'e') }};{% endfor %}"),
    ("for_else_filter", "{% for x in empty %}x{% else %}empty{% endfor %}|{% for x in l if x > 1 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}|{% for x in l if x > 9 %}{{ x }}{% else %}none{% endfor %}"),
    ("for_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
    ("for_unpack_nested", "{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% for c in [a, b] %}[{{ loop.index }}{{ c }}]{% endfor %}{{ loop.index }}{% endfor %}"),
    ("for_string_dict", "{% for c in 'héllo' %}{{ c }}.{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{% for x in undefined_iter %}x{% endfor %}"),
    ("for_changed", "{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}"),
    ("set_scoping", "{% set x = 1 %}{% for i in l %}{% set x = i %}{{ x }}{% endfor %}|{{ x }}|{% if t %}{% set x = 9 %}{% endif %}{{ x }}"),
    ("set_namespace", "{% set ns = namespace(a=0, b='x') %}{% for i in l %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}{{ ns.b }}{{ ns.c }}"),
    ("set_block", "{% set blk %}\n  inner {{ n }}\n{% endset %}[{{ blk }}]{% set up | upper %}abc{% endset %}{{ up }}"),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = 1, 2 %}{{ c }}"),
    ("macro", "{% macro m(a, b='dflt', c=none) %}[{{ a }}|{{ b }}|{{ c }}]{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(1, c=3) }}{{ m() }}"),
    ("macro_recursive", "{% macro r(x) %}{% if x is mapping %}{ {% for k, v in x.items() %}{{ k }}: {{ r(v) }} {% endfor %}}{% elif x is sequence and x is not string %}[{% for v in x %}{{ r(v) }},{% endfor %}]{% else %}{{ x }}{% endif %}{% endmacro %}{{ r(d) }}"),
    ("filter_block", "{% filter upper %}hello {{ s }}{% endfilter %}"),
    ("with_block", "{% with a = 1, b = n %}{{ a + b }}{% endwith %}{{ a }}"),
    ("if_elif", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}other{% endif %} {% endfor %}"),
    ("globals", "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ dict(a=1, b=2) }} {{ strftime_now('%Y-%m-%d %H:%M:%S %B %b %A %a %j') }}"),
    ("qwen_like", "{%- set ns = namespace(multi_step_tool=true, last_query_index=msgs|length - 1) %}\n{%- for message in msgs[::-1] %}\n    {%- set index = (msgs|length - 1) - loop.index0 %}\n    {%- if ns.multi_step_tool and message.role == \"user\" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}\n        {%- set ns.multi_step_tool = false %}\n        {%- set ns.last_query_index = index %}\n    {%- endif %}\n{%- endfor %}\n{{ ns.last_query_index }}"),
    # errors (the golden records that Jinja2 raised)
    ("err_raise", "{{ raise_exception('nope') }}"),
    ("err_add_none", "{{ 'a' + none }}"),
    ("err_add_undefined", "{{ 'a' + undefined_v }}"),
    ("err_attr_of_undefined", "{{ undefined_v.x }}"),
    ("err_in_none", "{{ 'a' in none }}"),
    ("err_mutate", "{{ l.append(1) }}"),
    ("err_unknown_filter", "{{ 1|nosuchfilter }}"),
    ("unknown_filter_not_run", "{% if false %}{{ 1|nosuchfilter }}{% endif %}"),
    ("unknown_test_not_run", "{% if false and 1 is nosuchtest %}{% endif %}"),
    ("err_syntax", "{% if %}"),
    ("err_unclosed", "{% for x in l %}"),
    ("err_compare", "{{ 1 < 'a' }}"),
    # comma-separated lists: trailing commas and malformed ones
    ("trailing_commas", "{{ [1, 2,] }}|{{ {'a': 1,} }}|{{ 'a-b'.split('-',) }}|{{ range(3,)|list }}|{{ (1, 2,) }}"),
    ("trailing_comma_call_kw", "{% macro m(a, b=2) %}{{ a }}{{ b }}{% endmacro %}{{ m(1,) }}{{ m(1, b=5,) }}"),
    ("err_trailing_comma_macro_params", "{% macro m(a, b=2,) %}{% endmacro %}"),
    ("err_trailing_comma_subscript", "{{ l[1,] }}"),
    ("err_trailing_comma_with", "{% with a=1, %}{{ a }}{% endwith %}"),
    ("for_iter_comma_recursive_is_a_name", "{% for a in l, recursive %}[{{ a }}]{% endfor %}"),
    ("err_trailing_comma_for_target", "{% for a, in [(1,)] %}{{ a }}{% endfor %}"),
    ("err_double_comma", "{{ [1,,2] }}"),
    ("err_lone_comma", "{{ [,] }}"),
    ("err_dict_no_colon", "{{ {'a' 1} }}"),
    ("err_positional_after_kw", "{{ range(stop=3, 1) }}"),
    ("err_macro_default_order", "{% macro m(a=1, b) %}{% endmacro %}"),
    ("err_unclosed_list", "{{ [1, 2 }}"),
    # the sandbox's limits and CPython's, and the operations the interpreter
    # budgets (added with Jinja2 3.1.6 / CPython 3.11, which reproduce every
    # case above byte for byte)
    ("range_max", "{{ range(100000)|length }} {{ range(5, -99995, -1)|length }} {{ range(2**62, 2**63 - 1, 2**62 // 100000 + 1)|length }}"),
    ("err_range_too_big", "{{ range(100001)|length }}"),
    ("err_range_too_big_step", "{{ range(-10**9, 10**9, 10000)|length }}"),
    ("namespace_holds_itself", "{% set ns = namespace(a=1) %}{% set ns.b = ns %}{% set ns.c = [ns, (ns,)] %}{{ ns }}"),
    ("int_4300_digits", "{{ (10 ** 4299)|string|length }} {{ -(10 ** 4299) % 7 }}"),
    ("err_int_4301_digits", "{{ 10 ** 4300 }}"),
    ("err_int_4301_digits_tojson", "{{ (10 ** 4300)|tojson }}"),
    ("err_int_literal_4301_digits", "{{ 1" + "0" * 4300 + " }}"),
    ("int_filter_long_string", "{{ ('9' * 5000)|int }} {{ ('9' * 5000)|int(7) }} {{ ('9' * 4300)|int|string|length }}"),
    ("tests_lower_upper", "{{ '123' is lower }} {{ 'abc' is lower }} {{ 'ABC1' is upper }} {{ 1 is lower }} {{ 'É' is upper }}"),
    ("round_extreme_precision", "{{ 1.5|round(1000) }} {{ 2.5|round(-400) }} {{ 1234.5678|round(-2) }}"),
    ("dict_keys_equal_numbers_tuples", "{{ {1e20: 'a'}[10**20] }} {{ {(1, 'a'): 2}[(1, 'a')] }} {{ {('a\\x00string:b',): 1, ('a', 'b'): 2}|length }} {{ {(1,): 1, (1.0,): 2, (True,): 3}|length }} {{ {('asb',): 1, ('a', 'b'): 2}|length }} {{ {(1, 'a'): 1, ('1', 'a'): 2, (1.5, None): 3, (1.5, 'None'): 4}|length }}"),
    ("slices_by_character", "{{ 'h\u00e9llo'[1:4] }} {{ 'h\u00e9llo'[::-1] }} {{ 'h\u00e9llo'[-2] }} {{ [1,2,3,4][::2] }} {{ [1,2,3][5:] }} {{ 'abc'[10:0:-1] }} {{ 'h\u00e9llo'[-100:100:3] }} {{ 'h\u00e9llo'.startswith('\u00e9l', 1, 3) }}"),
    ("repeat_edges", "{{ 'ab' * 0 }}|{{ [] * 100000000000 }}|{{ 'x' * -5 }}|{{ [1, 2] * True }}|{{ (1,) * 3 }}"),
    ("err_repeat_count_beyond_index", "{{ '' * 10**30 }}"),
    ("escape_sizes", "{{ '<a href=\"x\">&\\'</a>'|e }}"),
    ("indent_forms", "{{ 'a\\n\\nb'|indent(2) }}|{{ 'a\\n\\nb'|indent(2, true, true) }}|{{ 'a\\nb'|indent('--', first=true) }}|{{ ''|indent(first=true) }}|{{ 'x\\n'|indent }}"),
    ("replace_forms", "{{ 'abc'|replace('', '-') }} {{ 'abc'.replace('', '-', 2) }} {{ 'aaa'|replace('a', 'bb', 2) }} {{ 'aaa'.replace('a', '') }}"),
    ("err_join_non_str", "{{ ', '.join([1]) }}"),
    ("sort_stable_keys", "{{ [('b',1),('a',2),('B',3),('a',1)]|sort(attribute='0') }} {{ [('b',1),('a',2),('B',3),('a',1)]|sort(reverse=true, attribute='0') }} {{ ['b','A','a','B']|sort }} {{ ['b','A','a','B']|sort(case_sensitive=true) }} {{ {'b': 1, 'A': 2, 'a': 0}|dictsort }}"),
    ("strip_long_chars", "{{ 'xxhixx'.strip('abcdefgjklmnxyz') }} {{ 'xxhixx'|trim('x') }}"),
    ("format_forms", "{{ '%s-%d-%r' % ('a', 2, 'b') }} {{ '{}+{}={x}'.format(1, 2, x=3) }} {{ '{1}{0}{1}'.format('a', 'b') }} {{ '%s'|format([1, 'a']) }}"),
    ("err_format_manual_then_auto", "{{ '{0}{}'.format(1, 2) }}"),
    ("err_format_auto_then_manual", "{{ '{}{0}'.format(1, 2) }}"),
    ("split_forms", "{{ 'a b  c'.split(none, 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ 'a\\nb\\r\\nc'.splitlines() }} {{ ' a b '.rsplit() }}"),
    ("nested_compare", "{{ [[[[[[1]]]]]] == [[[[[[1]]]]]] }} {{ [[1,[2]]] < [[1,[3]]] }} {{ {'a': [1]} == {'a': [1]} }} {{ (1, 2) in [(1, 2)] }}"),
    ("big_int_arithmetic", "{{ 2 ** 200 // 3 ** 50 }} {{ (2 ** 100) * (3 ** 60) - 1 }} {{ -(2 ** 70) // 7 }} {{ (2 ** 70) % -9 }}"),
]


def main():
    env = make_env()
    out = {"vars": V, "cases": []}
    for name, src in CASES:
        case = {"name": name, "template": src}
        try:
            case["want"] = env.from_string(src).render(**V)
        except Exception as e:  # noqa: BLE001 - the golden records any failure
            case["error"] = type(e).__name__ + ": " + str(e)
        out["cases"].append(case)
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
