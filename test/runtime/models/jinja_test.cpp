// The Jinja interpreter (runtime/models/jinja.hpp) on its own. The table's expected texts
// are what transformers' Jinja environment (jinja2 3.1.6, trim_blocks, lstrip_blocks,
// loopcontrols, its tojson and strftime_now with the time fixed at 2026-03-14 09:26:53)
// renders for each template and variables.

#include "runtime/models/jinja.hpp"

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <string>
#include <vector>

namespace mpakt::models::jinja {
namespace {

constexpr std::int64_t fixed_now = 1773480413;  // 2026-03-14 09:26:53 UTC

result<std::string> run(const std::string& text, const std::string& vars_json = "{}", render_options o = {}) {
  auto p = parse(text, "t");
  if (!p) return std::move(p).err();
  rapidjson::Document d;
  d.Parse(vars_json.c_str());
  std::vector<std::pair<std::string, value>> vars;
  for (auto it = d.MemberBegin(); it != d.MemberEnd(); ++it)
    vars.emplace_back(it->name.GetString(), value::from_json(it->value));
  if (!o.now_utc_seconds) o.now_utc_seconds = fixed_now;
  return render(**p, vars, o);
}

struct golden {
  const char* name;
  const char* text;
  const char* vars;
  const char* expected;
};

const golden goldens[] = {
    {"whitespace_trim_and_lstrip",
     "{% if true %}\n  hi\n{% endif %}\n  {{ 'x' }}  {% if true %}y{% endif %}\n",
     "{}",
     "  hi\n  x  y"},
    {"whitespace_minus",
     "a  {{- 'b' -}}  c\n  {%- if true %} d {% endif -%}  \n e",
     "{}",
     "abc d e"},
    {"whitespace_plus_keeps",
     "x\n    {%+ if true %}y{% endif +%}\nz",
     "{}",
     "x\n    y\nz"},
    {"comments",
     "a  {#- c -#}  b {# d #}\n  e\n",
     "{}",
     "ab   e"},
    {"raw",
     "{% raw %}{{ not }}{% endraw %}!",
     "{}",
     "{{ not }}!"},
    {"loop_vars",
     "{% for x in ['a','b','c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}",
     "{}",
     "103TrueFalse3b;212FalseFalse3ac;321FalseTrue3b;"},
    {"loop_filter_else",
     "{% for x in [1,2,3,4] if x is even %}{{ x }}/{{ loop.length }} {% else %}none{% endfor %}{% for x in [] %}x{% else %}empty{% endfor %}",
     "{}",
     "2/2 4/2 empty"},
    {"loop_unpack_items",
     "{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}{% for k, v in d | items %}{{ k }}{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
     "{\"d\": {\"b\": 1, \"a\": [1, \"x\"]}}",
     "b=1,a=[1, 'x'],baba"},
    {"loop_scope",
     "{% set x = 1 %}{% for i in range(3) %}{{ x }}{% set x = x + 1 %}{% endfor %}{{ x }}",
     "{}",
     "1111"},
    {"break_continue",
     "{% for i in range(10) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}",
     "{}",
     "023"},
    {"namespace",
     "{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}",
     "{}",
     "6 0123"},
    {"block_set_filter",
     "{% set x | upper %}  hello {{ 1 + 1 }}  {% endset %}[{{ x }}]{% filter trim %}   padded   {% endfilter %}|",
     "{}",
     "[  HELLO 2  ]padded|"},
    {"macro_defaults_caller",
     "{% macro m(a, b='B', c=none) %}{{ a }}{{ b }}{{ c }}{% if caller is defined %}<{{ caller() }}>{% endif %}{% endmacro %}{{ m(1) }} {{ m(1, c=3) }} {% call m('x') %}inside{% endcall %}",
     "{}",
     "1BNone 1B3 xBNone<inside>"},
    {"macro_sees_later_globals",
     "{% macro m() %}{{ z }}{% endmacro %}{% set z = 3 %}{{ m() }}",
     "{}",
     "3"},
    {"arithmetic",
     "{{ 1 + 2 * 3 }} {{ 10 / 4 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1.5 + 1 }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 'a' ~ 1 ~ none }}",
     "{}",
     "7 2.5 3 -4 2 1024 2.5 ababab [1, 2] a1None"},
    {"printing",
     "{{ none }} {{ true }} {{ 1.0 }} {{ 1e20 }} {{ 0.1 }} {{ [1, 'a', none, true] }} {{ {'a': 1.5, \"b'\": none} }} {{ (1,) }} {{ u }}|",
     "{}",
     "None True 1.0 1e+20 0.1 [1, 'a', None, True] {'a': 1.5, \"b'\": None} (1,) |"},
    {"comparisons",
     "{{ 1 == 1.0 }} {{ 1 < 2 < 3 }} {{ 'a' in 'cat' }} {{ 2 not in [1, 3] }} {{ 'k' in {'k': 1} }} {{ [1, 2] == [1, 2] }} {{ true == 1 }} {{ not 0 and 'x' or 'y' }}",
     "{}",
     "True True True True True True True x"},
    {"conditional_expr",
     "{{ 'a' if x else 'b' }}{{ 'c' if not x }}|",
     "{\"x\": 0}",
     "bc|"},
    {"tests",
     "{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 'a' is string }}{{ 1 is number }}{{ 1.5 is float }}{{ 1 is integer }}{{ true is boolean }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ x is not none }}{{ false is false }}{{ true is true }}",
     "{\"x\": 1}",
     "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue"},
    {"filters_strings",
     "{{ '  a b  ' | trim }}|{{ 'Hello' | upper }}{{ 'Hello' | lower }}|{{ 'hello world-x' | title }}|{{ 'hELLO' | capitalize }}|{{ 'aXbX' | replace('X', '-') }}|{{ 'abc' | length }}|{{ 'héllo' | length }}|{{ 42 | string }}|{{ 'x' | default('d') }}{{ u | default('d') }}{{ '' | default('d', true) }}|{{ 'a\nb' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}|{{ 'one two  three' | wordcount }}",
     "{}",
     "a b|HELLOhello|Hello World-X|Hello|a-b-|3|5|42|xdd|a\n  b|  a\n  b|3"},
    {"filters_lists",
     "{{ [3,1,2] | sort }} {{ [3,1,2] | sort(reverse=true) }} {{ ['b','A','a'] | unique | list }} {{ [1,2,3] | first }}{{ [1,2,3] | last }} {{ [1,2] | join('-') }} {{ [1,2,3] | reverse | list }} {{ [1,2,3] | sum }} {{ [1,5,3] | max }}{{ [4,2,8] | min }} {{ xs | map(attribute='n') | list }} {{ xs | selectattr('n', 'gt', 1) | map(attribute='n') | join(',') }} {{ xs | rejectattr('n', 'equalto', 1) | list | length }} {{ [1,2,3,4] | select('odd') | list }} {{ [1,2,3,4] | reject('odd') | list }} {{ ['a','b'] | map('upper') | list }} {{ {'b': 1, 'a': 2} | dictsort }} {{ 'ab' | list }}",
     "{\"xs\": [{\"n\": 1}, {\"n\": 2}, {\"n\": 3}]}",
     "[1, 2, 3] [3, 2, 1] ['b', 'A'] 13 1-2 [3, 2, 1] 6 52 [1, 2, 3] 2,3 2 [1, 3] [2, 4] ['A', 'B'] [('a', 2), ('b', 1)] ['a', 'b']"},
    {"filters_numbers",
     "{{ -3 | abs }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 7 | round }} {{ '42' | int }} {{ '4.5' | float }} {{ 'x' | int(7) }} {{ 3.9 | int }}",
     "{}",
     "3 2.57 2.0 4.0 7 42 4.5 7 3"},
    {"tojson",
     "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ 'é\"<>&' | tojson }}|{{ 'é' | tojson(ensure_ascii=true) }}|{{ d | tojson(separators=(',', ':')) }}|{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}|{{ [] | tojson(indent=2) }}|{{ 1.0 | tojson }}",
     "{\"d\": {\"a\": [1, 2.5, null, true], \"b\": {\"c\": \"x\\ny\"}}}",
     "{\"a\": [1, 2.5, null, true], \"b\": {\"c\": \"x\\ny\"}}|{\n  \"a\": [\n    1,\n    2.5,\n    null,\n    true\n  ],\n  \"b\": {\n    \"c\": \"x\\ny\"\n  }\n}|\"é\\\"<>&\"|\"\\u00e9\"|{\"a\":[1,2.5,null,true],\"b\":{\"c\":\"x\\ny\"}}|{\"a\": 2, \"b\": 1}|[]|1.0"},
    {"string_methods",
     "{{ '  x  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  x'.lstrip() }}|{{ 'x\n'.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}|{{ 'hello world'.title() }}|{{ 'a-b'.replace('-', '+') }}|{{ 'banana'.count('a') }}|{{ 'banana'.find('n') }}|{{ '-'.join(['a', 'b']) }}|{{ '{} and {}'.format(1, 'x') }}|{{ 'abc'.upper() }}|{{ 'x</think>y'.split('</think>')[-1] }}",
     "{}",
     "x|a|x|x|['a', 'b', '', 'c']|['a', 'b']|['a', 'b,c']|TrueTrue|Hello World|a+b|3|2|a-b|1 and x|ABC|y"},
    {"dict_methods",
     "{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 5) }} {{ d.keys() | list }} {{ d.values() | list }} {{ d['a'] }}{{ d.a }}{{ d.missing is defined }}",
     "{\"d\": {\"a\": 1, \"b\": 2}}",
     "1None5 ['a', 'b'] [1, 2] 11False"},
    {"subscript_slice",
     "{{ xs[0] }}{{ xs[-1] }}{{ xs[1:] }}{{ xs[:-1] }}{{ xs[::-1] }}{{ xs[5] is defined }}{{ 'héllo'[1] }}{{ 'hello'[1:3] }}{{ 'hello'[::-1] }}",
     "{\"xs\": [1, 2, 3]}",
     "13[2, 3][1, 2][3, 2, 1]Falseéelolleh"},
    {"markup_escapes_on_plus",
     "{{ 'a<'|safe + '<b>' }}|{{ 'a' ~ ('<'|safe) }}|{{ '<x>' | e }}",
     "{}",
     "a<&lt;b&gt;|a<|&lt;x&gt;"},
    {"generation_tag",
     "{% generation %}kept{% endgeneration %}",
     "{}",
     "kept"},
    {"strftime_now",
     "{{ strftime_now('%Y-%m-%d %d %b %Y %H:%M') }}",
     "{}",
     "2026-03-14 14 Mar 2026 09:26"},
    {"dict_global_and_literal_int_keys",
     "{{ dict(a=1, b=2) }} {% set m = {0: 'zero', 1024: 'k'} %}{{ m[1024] }}{% for k, v in m | dictsort %}{{ k }}{% endfor %}",
     "{}",
     "{'a': 1, 'b': 2} k01024"},
    {"range",
     "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(3, 0, -1) | list }}",
     "{}",
     "[0, 1, 2] [1, 3, 5] [3, 2, 1]"},
    {"none_attribute_is_undefined",
     "{{ n.x is defined }}{{ n['x'] is defined }}",
     "{\"n\": null}",
     "FalseFalse"},
};

TEST(Jinja, renders_as_transformers_jinja_does) {
  for (const auto& g : goldens) {
    auto r = run(g.text, g.vars);
    ASSERT_TRUE(r.ok()) << g.name << ": " << r.err().message;
    EXPECT_EQ(*r, g.expected) << g.name;
  }
}

TEST(Jinja, unsupported_constructs_refused_at_parse_naming_them_and_their_line) {
  const std::pair<const char*, const char*> cases[] = {
      {"a\n{% include 'x.j2' %}", "t line 2: the 'include' statement is not supported"},
      {"{% extends 'base' %}", "t line 1: the 'extends' statement is not supported"},
      {"{% import 'm' as m %}", "t line 1: the 'import' statement is not supported"},
      {"{% block b %}{% endblock %}", "t line 1: the 'block' statement is not supported"},
      {"{% do xs.append(1) %}", "t line 1: the 'do' statement is not supported"},
      {"\n\n{{ xs | batch(2) }}", "t line 3: the filter 'batch' is not supported"},
      {"{{ x | no_such_filter }}", "t line 1: the filter 'no_such_filter' is not supported"},
      {"{{ x is no_such_test }}", "t line 1: the test 'no_such_test' is not supported"},
      {"{% for x in xs recursive %}{% endfor %}", "t line 1: the 'recursive' for loop is not supported"},
      {"{{ f(*args) }}", "t line 1: *args and **kwargs in calls are not supported"},
      {"{% if x %}", "t line 1: the template ends before {% endif %}"},
      {"{% break %}", "t line 1: 'break' is outside a for loop"},
      {"{{ 'open }}", "t line 1: a string literal is not closed"},
      {"{% endfor %}", "t line 1: unexpected 'endfor'"},
  };
  for (const auto& [text, message] : cases) {
    auto p = parse(text, "t");
    ASSERT_FALSE(p.ok()) << text;
    EXPECT_EQ(p.err().message, message) << text;
  }
}

TEST(Jinja, unknown_filter_inside_a_conditional_fails_only_when_reached) {
  // Jinja compiles these and raises when the branch runs; transformers does the same.
  EXPECT_EQ(run("{% if false %}{{ x | from_json }}{% endif %}ok").value(), "ok");
  auto r = run("{% if true %}{{ '{}' | from_json }}{% endif %}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().message, "t line 1: the filter 'from_json' is not supported");
}

TEST(Jinja, raise_exception_names_the_templates_message) {
  auto r = run("line one\n{{ raise_exception('Only user and assistant roles are supported!') }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().message, "t line 2 raised an error: Only user and assistant roles are supported!");
}

TEST(Jinja, undefined_is_empty_but_its_attributes_are_errors) {
  EXPECT_EQ(run("[{{ nothing }}]{{ nothing | length }}{% for x in nothing %}x{% endfor %}").value(), "[]0");
  auto r = run("{{ nothing.field }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().message, "t line 1: 'nothing' is undefined, so it has no attribute 'field'");
  EXPECT_FALSE(run("{{ nothing + 'a' }}").ok());
  EXPECT_FALSE(run("{{ nothing() }}").ok());
}

TEST(Jinja, sandbox_forbids_changing_lists_and_dicts) {
  auto r = run("{% set xs = [1] %}{{ xs.append(2) }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.err().message.find("sandbox forbids"), std::string::npos) << r.err().message;
  EXPECT_FALSE(run("{{ d.update({'a': 1}) }}", R"({"d": {}})").ok());
  auto ns = run("{% set x = 1 %}{% set x.y = 2 %}");
  ASSERT_FALSE(ns.ok());
  EXPECT_NE(ns.err().message.find("is not a namespace()"), std::string::npos);
}

TEST(Jinja, generators_from_map_cannot_be_measured_or_serialised) {
  EXPECT_FALSE(run("{{ [1] | map('string') | tojson }}").ok());
  EXPECT_FALSE(run("{{ [1] | map('string') | length }}").ok());
  EXPECT_EQ(run("{{ [1] | map('string') | list | tojson }}").value(), "[\"1\"]");
  EXPECT_EQ(run("{{ none | selectattr('x') | list }}").value(), "[]");
}

TEST(Jinja, limits_refuse_runaway_templates) {
  render_options o;
  o.lim.max_steps = 1000;
  auto loops = run("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}", "{}", o);
  ASSERT_FALSE(loops.ok());
  EXPECT_NE(loops.err().message.find("more than 1000 loop iterations and calls"), std::string::npos);

  o = {};
  o.lim.max_output_bytes = 1000;
  auto big = run("{% for i in range(300) %}hello{% endfor %}", "{}", o);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.err().message.find("longer than 1000 bytes"), std::string::npos);
  EXPECT_FALSE(run("{{ 'x' * 100000 }}", "{}", o).ok());

  auto deep = run("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}");
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.err().message.find("macros call each other more than 64 deep"), std::string::npos);

  std::string nested;
  for (int i = 0; i < 500; ++i) nested += "(";
  auto p = parse("{{ " + nested + "1" + std::string(500, ')') + " }}", "t");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.err().message.find("nests deeper than"), std::string::npos);

  EXPECT_FALSE(run("{{ range(1000000) | length }}").ok());
  EXPECT_FALSE(run("{{ 9223372036854775807 + 1 }}").ok());
  EXPECT_FALSE(run("{{ 1 // 0 }}").ok());
}

TEST(Jinja, a_program_renders_again_with_new_variables) {
  auto p = parse("{% for m in messages %}{{ m }}{% endfor %}", "t");
  ASSERT_TRUE(p.ok());
  for (const char* who : {"a", "b"}) {
    auto r = render(**p, {{"messages", value::list({value(who)})}});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, who);
  }
}

}  // namespace
}  // namespace mpakt::models::jinja
