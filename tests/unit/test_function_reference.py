"""The SQL function catalogue: every name of the original's list resolves, each is documented, and the
reference table in docs/transforms.md is the catalogue's."""

from __future__ import annotations

import re

import pytest

from streamling.builtins.plugin import PLUGIN
from streamling.sql.functions import catalogue

ORIGINAL = """
to_u256 u256_to_string u256_add u256_sub u256_mul u256_div u256_mod to_i256 i256_to_string i256_add i256_sub
i256_mul i256_div i256_mod i256_neg i256_abs to_int64 u256 i256
to_decimal_arb decimal_arb_add decimal_arb_sub decimal_arb_mul decimal_arb_div decimal_arb_mod decimal_arb_eq
decimal_arb_neq decimal_arb_lt decimal_arb_lte decimal_arb_gt decimal_arb_gte decimal_arb_to_string
decimal_arb_to_sort_key decimal_arb_to_decimal128 decimal_arb_to_decimal256
decimal_arb_rescale decimal_arb_restamp to_decimal_arb_from_string try_to_decimal_arb_from_string
to_decimal_arb_from_int legacy_wide_int_to_decimal_arb decimal_arb_neg decimal_arb_abs decimal_arb_greatest
decimal_arb_least decimal_arb_array_min decimal_arb_array_max decimal_arb_array_sort to_decimal_arb_from_decimal128
to_decimal_arb_from_decimal256 decimal_arb_round to_decimal_arb_from_str to_decimal_arb_from_float
decimal_arb_to_int64 decimal_arb_to_float64
_gs_keccak256 _gs_xxhash _gs_from_base58 _gs_hex_to_byte _gs_byte_to_hex reverse_bytes32 _gs_conv_base uuid7
_gs_split_string_to_array _gs_generate_series _gs_zip_arrays array_enumerate array_filter array_filter_first
array_filter_in array_struct_field to_large_list _gs_map_to_array_struct coalesce_meta
_gs_json_objects_to_clickhouse_tuples
json_string json_quote json_unquote json_exists json_value json_query json_array json_array_absent_on_null
json_object json_object_absent_on_null json parse_json try_parse_json is_json
json_arrayagg_null_on_null json_arrayagg_absent_on_null json_objectagg_null_on_null json_objectagg_absent_on_null
regexp_extract regexp_extract_all regexp_replace regexp_substr regexp_count regexp_instr locate instr bin elt parse_url split split_index translate
translate3 unhex url_encode url_decode startswith endswith lowercase uppercase regexp similar charlength hex
now current_timestamp current_time current_date today
""".split()

BEGIN, END = "<!-- sql-functions:begin -->", "<!-- sql-functions:end -->"


@pytest.mark.parametrize("name", ORIGINAL)
def test_every_name_of_the_original_resolves(name: str) -> None:
    assert catalogue.lookup(name) is not None
    assert catalogue.lookup(name.upper()) is catalogue.lookup(name)


def test_every_function_is_documented() -> None:
    for doc in catalogue.docs():
        assert doc.returns and doc.nulls and doc.example, doc
        assert doc.engine in ("Spark built-in", "Arrow"), doc
        assert re.search(rf"\b{re.escape(doc.name)}\b", doc.example, re.IGNORECASE) or any(
            re.search(rf"\b{re.escape(a)}\b", doc.example, re.IGNORECASE) for a in doc.aliases
        ), f"{doc.name}: the example does not call it"


def test_arrow_functions_are_the_builtin_plugins_functions() -> None:
    assert list(PLUGIN.functions) == catalogue.ARROW_CLASSES


def test_the_documented_table_is_the_catalogue() -> None:
    text = catalogue.DOC.read_text()
    table = text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip("\n") + "\n"
    assert table == catalogue.markdown(), (
        "docs/transforms.md's SQL function table is stale: run `python -m streamling.sql.functions.catalogue --write`"
    )
