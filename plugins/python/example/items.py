"""The example's task rows: a second module of the plugin, to show that a
plugin folder carries its own modules."""


class Item:
    def __init__(self, id, text, category=""):
        self.id, self.text, self.category = id, text, category

    def to_json(self):
        return {"id": self.id, "text": self.text, "category": self.category}

    @classmethod
    def from_json(cls, d):
        d = d if isinstance(d, dict) else {}
        return cls(str(d.get("id", "")), str(d.get("text", "")), str(d.get("category", "")))


def items_from(rows):
    """(Item, None) for each good row, (None, why) for each bad one."""
    for row in rows:
        if not isinstance(row, dict) or not row.get("id") or not isinstance(row.get("id"), str):
            yield None, "task without an id"
            continue
        if not isinstance(row.get("text", ""), str):
            yield None, f"task {row['id']}: text is not a string"
            continue
        yield Item(row["id"], row.get("text", ""), str(row.get("category") or "")), None
