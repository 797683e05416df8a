def test_visible_text_drops_only_invisible_ends():
    from core.security import visible_text

    assert visible_text("\x01\x02") == "" and visible_text("\u200b \u200b") == "" and visible_text("  ") == ""
    assert visible_text("\u200b ok \x01") == "ok" and visible_text("a\u200bb") == "a\u200bb"
    assert visible_text("\u043e\u043a") == "\u043e\u043a" and visible_text("好") == "好"
    assert visible_text("\u115f\u3164\uffa0\u2800") == ""  # blank letters
