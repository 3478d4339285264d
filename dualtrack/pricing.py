"""Refresh the price table from the AWS Pricing API (GetProducts), and load tables from files.

Only on-demand Linux, shared-tenancy, no pre-installed software, capacitystatus=Used rows are read: Capacity Block
rows come back at $0 and would silently zero a trial's instance cost.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, Unpack

from lambdas.domain.json_types import JsonIn, JsonMapping, JsonObject
from lambdas.domain.money.prices import PricesInvalid, PriceTable, load_price_table
from lambdas.domain.trial.catalogue import load_catalogue

if TYPE_CHECKING:
    from mypy_boto3_pricing.type_defs import FilterTypeDef, GetProductsRequestTypeDef, GetProductsResponseTypeDef


class ProductSource(Protocol):
    """What :func:`refresh` asks: the Pricing API client's GetProducts."""

    def get_products(self, **kwargs: Unpack[GetProductsRequestTypeDef]) -> GetProductsResponseTypeDef: ...

PRICE_TABLE_ENV = "DUALTRACK_PRICE_TABLE"
ON_DEMAND_FILTERS = {
    "operatingSystem": "Linux",
    "tenancy": "Shared",
    "preInstalledSw": "NA",
    "capacitystatus": "Used",
    "marketoption": "OnDemand",
}


def product_filters(instance_type: str, region: str) -> list[FilterTypeDef]:
    fields = {"instanceType": instance_type, "regionCode": region, **ON_DEMAND_FILTERS}
    return [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in fields.items()]


def hourly_usd_from_products(price_list: Iterable[str | JsonMapping]) -> str | None:
    """The on-demand hourly USD rate in a GetProducts PriceList, or None if no usable (non-zero) row."""
    rates: set[str] = set()
    for item in price_list:
        product = _object(json.loads(item) if isinstance(item, str) else item)
        attrs = _object(_object(product.get("product")).get("attributes"))
        if attrs.get("marketoption", "OnDemand") != "OnDemand" or attrs.get("capacitystatus", "Used") != "Used":
            continue
        for term in _object(_object(product.get("terms")).get("OnDemand")).values():
            for entry in _object(_object(term).get("priceDimensions")).values():
                dim = _object(entry)
                usd = _object(dim.get("pricePerUnit")).get("USD")
                if dim.get("unit") in ("Hrs", "Hours") and isinstance(usd, str) and usd and float(usd) > 0:
                    rates.add(usd.rstrip("0").rstrip(".") if "." in usd else usd)
    if len(rates) > 1:
        raise ValueError(f"ambiguous on-demand rates {sorted(rates)}; the filters matched several products")
    return rates.pop() if rates else None


def refresh(region: str, *, client: ProductSource | None = None, instance_types: Iterable[str] | None = None,
            base: PriceTable | None = None, today: date | None = None,
            progress: Callable[[str], None] | None = None) -> tuple[PriceTable, list[str]]:
    """Query GetProducts for each catalogue instance type; returns the new table and the types left unchanged."""
    if client is None:
        import boto3  # deferred: only this command talks to AWS

        client = boto3.client("pricing", region_name="us-east-1")
    table = base or load_price_table()
    types = list(instance_types or sorted(load_catalogue().instances))
    rows: JsonObject = {}
    missing: list[str] = []
    for itype in types:
        if progress:
            progress(f"GetProducts {itype} {region}")
        response = client.get_products(ServiceCode="AmazonEC2", Filters=product_filters(itype, region),
                                       FormatVersion="aws_v1", MaxResults=100)
        rate = hourly_usd_from_products(response.get("PriceList", []))
        if rate is None:
            missing.append(itype)
        else:
            rows[itype] = {"hourly_usd": rate, "confidence": "pricing-api"}
    stamp = (today or date.today()).isoformat()
    new = table.with_overrides({
        "instances": {region: rows}, "version": stamp,
        "source": f"AWS Pricing API GetProducts (AmazonEC2, OnDemand, Linux, Shared, capacitystatus Used) on {stamp}; "
                  f"rows not returned kept from {table.version}",
    })
    return new, missing


def load_table_file(path: str | None) -> PriceTable:
    """A price table from --prices FILE or $DUALTRACK_PRICE_TABLE, else the shipped table. Raises ``PricesInvalid``
    naming the file (and the field) when it cannot be read or does not validate."""
    path = path or os.environ.get(PRICE_TABLE_ENV)
    if not path:
        return load_price_table()
    try:
        base = json.loads(Path(path).read_text())
    except OSError as exc:
        raise PricesInvalid(f"{path}: cannot read the price table: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PricesInvalid(f"{path}: not JSON ({exc}); give a table in the shipped table's format "
                            "(`dualtrack prices show --json`)") from None
    if not isinstance(base, dict):
        raise PricesInvalid(f"{path}: a price table is a JSON object (got {type(base).__name__}); see "
                            "`dualtrack prices show --json`")
    try:
        return load_price_table(base=base)
    except PricesInvalid as exc:
        raise PricesInvalid(f"{path}: {exc}") from None


def _object(value: JsonIn) -> JsonMapping:
    """``value`` when it is a JSON object, else an empty one (a field the price list leaves out)."""
    return value if isinstance(value, Mapping) else {}
