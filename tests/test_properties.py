"""The one ``.properties`` reader (:func:`kbroker.config.parse_properties`) of the broker and the tools reads what
Java's ``Properties.load`` reads.

The expected values were obtained once from Java (OpenJDK 17.0.15): the text of ``JAVA_CASES`` written to a file
and loaded by a ten-line program, ``new Properties().load(new InputStreamReader(new FileInputStream(f), "UTF-8"))``,
that printed every ``stringPropertyNames()`` key with ``getProperty(key)``; its answers are hard-coded below."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.cli._common import CliError, load_properties
from kbroker.config import BrokerConfig, ConfigException, parse_properties
from kbroker.storage.log_manager import read_meta_properties

JAVA_CASES = (
    "# a comment\n"
    "! a bang comment\n"
    "   # an indented comment\n"
    "plain=value\n"
    "colon:value\n"
    "space.separated value with spaces\n"
    "tab.separated\ttab value\n"
    "  padded.key   =   padded value   \n"
    "key\\ with\\ spaces=v1\n"
    "key\\=with\\=equals=v2\n"
    "key\\:with\\:colons=v3\n"
    "unicode=caf\\u00e9 \\u2603 \\ud83d\\ude00\n"
    "unicode\\u002ekey=in a key\n"
    "continued=first, \\\n     second, \\\n\tthird\n"
    "continued.comment=a \\\n  # not a comment\n"
    "comment.no.continuation=x\n"
    "# a comment ending in a backslash \\\n"
    "after.comment=y\n"
    "escapes=tab\\tnewline\\nreturn\\rformfeed\\fbackslash\\\\other\\q\n"
    "backslash.at.end=C:\\\\path\\\\\n"
    "next.line=z\n"
    "equals.in.value=a=b:c\n"
    "separator.then.equals = : value\n"
    "key.only\n"
    "empty.value=\n"
    "duplicate=first\n"
    "duplicate=second\n"
    "crlf=one\r\n"
    "cr=two\r"
    "\fformfeed.key=three\n"
    "blank.after.continuation=start \\\n"
    "\n"
    "after.blank=four\n"
)

#: what Java 17's Properties.load gave for JAVA_CASES (see the module docstring)
JAVA_ANSWERS = {
    "after.blank": "four",
    "after.comment": "y",
    "backslash.at.end": "C:\\path\\",
    "blank.after.continuation": "start ",
    "colon": "value",
    "comment.no.continuation": "x",
    "continued": "first, second, third",
    "continued.comment": "a # not a comment",
    "cr": "two",
    "crlf": "one",
    "duplicate": "second",
    "empty.value": "",
    "equals.in.value": "a=b:c",
    "escapes": "tab\tnewline\nreturn\rformfeed\fbackslash\\otherq",
    "formfeed.key": "three",
    "key with spaces": "v1",
    "key.only": "",
    "key:with:colons": "v3",
    "key=with=equals": "v2",
    "next.line": "z",
    "padded.key": "padded value   ",
    "plain": "value",
    "separator.then.equals": ": value",
    "space.separated": "value with spaces",
    "tab.separated": "tab value",
    "unicode": "caf\u00e9 \u2603 \U0001F600",
    "unicode.key": "in a key",
}


def test_reads_what_java_reads():
    assert parse_properties(JAVA_CASES, trim_values=False) == JAVA_ANSWERS


def test_values_are_trimmed_as_kafka_config_parsing_does():
    got = parse_properties(JAVA_CASES)
    assert got == {k: v.strip() for k, v in JAVA_ANSWERS.items()}
    assert got["padded.key"] == "padded value" and got["blank.after.continuation"] == "start"


def test_broker_and_tools_read_a_file_the_same(tmp_path):
    path = tmp_path / "some.properties"
    path.write_text(JAVA_CASES, encoding="utf-8")
    tool = load_properties(str(path))
    assert BrokerConfig.from_file(path).props == tool
    assert tool["key with spaces"] == "v1" and tool["unicode"] == "caf\u00e9 \u2603 \U0001F600"
    (tmp_path / "meta.properties").write_text(JAVA_CASES, encoding="utf-8")
    assert read_meta_properties(tmp_path) == tool


def test_sasl_jaas_config_over_continuation_lines():
    """A JAAS line split over several lines, as Kafka's docs write them in client.properties."""
    text = ("sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
            "    username=\"alice\" \\\n"
            "    password=\"alice-secret\";\n")
    assert parse_properties(text) == {"sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule '
                                                          'required username="alice" password="alice-secret";'}


@pytest.mark.parametrize("text", ["#:\n", "#: meta=data\n", "#:key value\n"])
def test_colon_comments_are_comments(text):
    """Java skips every line starting with # (jproperties alone would read ``#:`` lines as metadata, or refuse)."""
    assert parse_properties(text + "k=v\n") == {"k": "v"}


@pytest.mark.parametrize("text", ["k=\\u00e\n", "k=\\uZZZZ\n", "k=a\\\n  \\u12\n", "k=\\\\\\u12g4\n"])
def test_malformed_unicode_escape_is_refused_as_java_does(text):
    """Java's Properties.load throws ``IllegalArgumentException: Malformed \\uxxxx encoding.`` for these."""
    with pytest.raises(ConfigException, match="Malformed \\\\uxxxx encoding"):
        parse_properties(text)


@pytest.mark.parametrize("text,expected", [
    ("# C:\\users\\me\nk=v\n", {"k": "v"}),        # a comment is not parsed: no escape in it is malformed
    ("k=\\\\u00e\n", {"k": "\\u00e"}),              # an escaped backslash followed by 'u': no escape
])
def test_what_is_not_a_unicode_escape(text, expected):
    assert parse_properties(text) == expected


def test_tool_reports_a_malformed_file_as_one_line(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.password=\\u12\n", encoding="utf-8")
    with pytest.raises(CliError, match=f"cannot read {path}: Malformed \\\\uxxxx encoding on line 2"):
        load_properties(str(path))


def test_missing_file(tmp_path):
    with pytest.raises(CliError, match="cannot read"):
        load_properties(str(tmp_path / "absent.properties"))
    assert load_properties(None) == {}
    assert not Path(tmp_path / "absent.properties").exists()
