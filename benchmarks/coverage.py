"""How often bertkit's "poor vocabulary coverage" warning fires: false alarms on English, hits on other scripts.

    python benchmarks/coverage.py [--model default] [--json coverage.json]

False alarms: every SST-2 sentence (train and dev) and every CoNLL-2003 sentence (train and dev) of
../shared/data, checked one row at a time as `bertkit embed` checks its rows, and each SST-2 file as a whole as
`bertkit tokenize` / `embed` sum it up; the packaged model's vocabulary is English, so each warning there is false.
Hits: short sentences (news-style, 3-12 words) in eleven languages written in other scripts, one row each; the
English uncased vocabulary covers none of them well, so each row should be flagged (a miss is a row it passes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

DATA = Path(os.environ.get("BERTKIT_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))

OTHER_SCRIPTS = {
    "Korean": [
        "나는 한국을 사랑해요",
        "오늘 서울의 날씨는 맑습니다",
        "이 영화는 정말 재미있었다",
        "정부는 새로운 정책을 발표했다",
    ],
    "Japanese": [
        "私は日本が好きです",
        "今日は東京で雨が降っています",
        "この映画はとても面白かった",
        "政府は新しい政策を発表した",
    ],
    "Chinese": ["我喜欢这部电影", "今天北京天气很好", "政府宣布了新的经济政策", "这家公司的股价上涨了"],
    "Russian": [
        "Я люблю этот фильм",
        "Сегодня в Москве идёт дождь",
        "Правительство объявило новую политику",
        "Акции компании выросли",
    ],
    "Greek": ["Μου αρέσει πολύ αυτή η ταινία", "Σήμερα βρέχει στην Αθήνα", "Η κυβέρνηση ανακοίνωσε νέα μέτρα"],
    "Arabic": ["أحب هذا الفيلم كثيرا", "الطقس جميل اليوم في القاهرة", "أعلنت الحكومة عن سياسة جديدة"],
    "Hebrew": ["אני אוהב את הסרט הזה", "היום יורד גשם בתל אביב", "הממשלה הודיעה על מדיניות חדשה"],
    "Hindi": ["मुझे यह फिल्म बहुत पसंद है", "आज दिल्ली में बारिश हो रही है", "सरकार ने नई नीति की घोषणा की"],
    "Thai": ["ฉันชอบภาพยนตร์เรื่องนี้มาก", "วันนี้ฝนตกที่กรุงเทพ", "รัฐบาลประกาศนโยบายใหม่"],
    "Georgian": ["მე მიყვარს ეს ფილმი", "დღეს თბილისში წვიმს", "მთავრობამ ახალი პოლიტიკა გამოაცხადა"],
    "Armenian": [
        "Ես սիրում եմ այս ֆիլմը",
        "Այսօր Երևանում անձրև է գալիս",
        "Կառավարությունը հայտարարեց նոր քաղաքականություն",
    ],
}


def sst2_sentences(name: str) -> list[str]:
    lines = (DATA / "sst2" / name).read_text(encoding="utf-8").splitlines()
    return [line.split("\t")[0] for line in lines[1:] if line.strip()]


def conll_sentences(name: str) -> list[str]:
    from bertkit.io.conll import read_tagged

    return [" ".join(words) for words in read_tagged(DATA / "conll2003" / name).words]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model (default: the packaged one)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    from bertkit import Encoder
    from bertkit.encoder.coverage import coverage
    from bertkit.encoder.tokenize import encode

    encoder = Encoder.from_pretrained(args.model)
    tokenizer, unk = encoder.tokenizer, encoder.tokenizer.unk_token_id

    def checked(texts: list[str]):
        encoded = encode(tokenizer, texts, max_length=10**9, long_text="keep")
        return coverage(encoded, unk)

    report: dict = {"model": encoder.source.spec, "false_alarms": {}, "hits": {}}
    english = {
        "SST-2 train": sst2_sentences("train.tsv"),
        "SST-2 dev": sst2_sentences("dev.tsv"),
        "CoNLL-2003 train": conll_sentences("train.txt"),
        "CoNLL-2003 dev": conll_sentences("dev.txt"),
    }
    for name, texts in english.items():
        summary = checked(texts)
        flagged = summary.poor_rows
        report["false_alarms"][name] = {
            "rows": len(texts),
            "flagged": len(flagged),
            "rate": len(flagged) / len(texts),
            "whole_file_flagged": summary.poor,
            "examples": [texts[i][:80] for i in flagged[:5]],
        }
        print(
            f"{name:18} {len(flagged):5} of {len(texts):6} rows flagged ({len(flagged) / len(texts):.3%}); "
            f"the whole file {'FLAGGED' if summary.poor else 'not flagged'}"
        )
        for row in flagged[:5]:
            print(f"    e.g. {texts[row][:80]!r}")
    hits = total = 0
    for language, texts in OTHER_SCRIPTS.items():
        flagged = len(checked(texts).poor_rows)
        hits, total = hits + flagged, total + len(texts)
        report["hits"][language] = {"rows": len(texts), "flagged": flagged}
        print(f"{language:10} {flagged} of {len(texts)} flagged")
    report["hit_rate"] = hits / total
    print(f"hit rate on other scripts: {hits} of {total} ({hits / total:.1%})")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
