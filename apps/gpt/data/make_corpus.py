#!/usr/bin/env python3
"""Writes tiny_corpus.txt: a few hand-written paragraphs followed by sentences drawn from a small
hand-written grammar (fixed seed), about 40 KB of plain English text for byte-level training.
Everything here was written for tpipe; no outside text is used.

    python3 make_corpus.py > tiny_corpus.txt
"""
import random

INTRO = """\
The Lighthouse Keeper's Notebook

The lamp was lit at dusk, as it had been every evening for forty years. The keeper climbed the
one hundred and twelve steps with a can of oil in one hand and a lantern in the other, and at the
top he wound the clockwork that turned the great lens. From the gallery he could see the harbour,
the fishing boats coming home, and the long grey line of the breakwater.

He kept a notebook on the table by the window. In it he wrote the weather, the ships that passed,
and anything else that seemed worth remembering. The wind is from the west and the sea is calm.
Three boats came in before dark. A gull sat on the rail and watched me eat my supper.

On the first morning of spring he found a small boat on the rocks below the tower. Nobody was in
it. He pulled it above the tide line, turned it over, and painted its name again on the bow, so
that its owner would know it if ever he came looking for it. Nobody came that year, or the next.

In the winter the storms were long and the nights were longer. The keeper counted the seconds
between the flashes of the lamp across the water: one, two, three, four, five, and the beam came
round again. He said that a light which keeps its time is worth more than a light which is bright.

"""

SUBJECTS = ["the keeper", "the old fisherman", "a small girl", "the harbour master", "the baker",
            "a grey cat", "the schoolteacher", "my brother", "the ferryman", "a tired traveller",
            "the miller", "the young sailor", "the doctor", "our neighbour", "the night watchman"]
VERBS_T = ["mended", "painted", "carried", "found", "lost", "counted", "cleaned", "opened", "sold",
           "watched", "followed", "borrowed", "returned", "wrote about", "remembered"]
OBJECTS = ["the net", "a blue boat", "the lantern", "an old map", "the garden gate", "a basket of apples",
           "the church bell", "a letter from the city", "the broken clock", "a pair of boots",
           "the kitchen window", "a loaf of bread", "the ship's compass", "a box of candles", "the red kite"]
PLACES = ["by the harbour", "on the hill", "in the market", "near the mill", "under the bridge",
          "at the end of the pier", "behind the church", "in the lighthouse", "along the shore",
          "beside the river", "in the village square", "on the cliff path"]
TIMES = ["in the morning", "before dawn", "at noon", "in the evening", "after the storm",
         "on a cold winter night", "during the fair", "when the tide was out", "on market day",
         "at the end of summer", "while it was raining", "just after midnight"]
ADJS = ["quiet", "bright", "cold", "windy", "warm", "grey", "calm", "long", "strange", "happy"]
NOUNS = ["day", "night", "morning", "week", "season", "journey", "evening", "winter"]
FEEL = ["was glad", "was surprised", "felt sorry", "laughed", "said nothing", "sang a song",
        "went home", "sat down to rest", "wrote it in the notebook", "told everyone about it"]
WEATHER = ["The wind is from the {d} and the sea is {s}.", "Fog came in from the {d} and stayed all day.",
           "Rain in the {t}, then clear skies.", "A {a} {n}; the sea was {s}."]
DIRS = ["north", "south", "east", "west"]
SEAS = ["calm", "rough", "high", "flat", "grey", "restless"]


def cap(s):
    return s[0].upper() + s[1:]


def sentence(r):
    k = r.randrange(6)
    if k == 0:
        return f"{cap(r.choice(SUBJECTS))} {r.choice(VERBS_T)} {r.choice(OBJECTS)} {r.choice(PLACES)}."
    if k == 1:
        return f"{cap(r.choice(TIMES))}, {r.choice(SUBJECTS)} {r.choice(VERBS_T)} {r.choice(OBJECTS)}."
    if k == 2:
        return (f"When {r.choice(SUBJECTS)} {r.choice(VERBS_T)} {r.choice(OBJECTS)}, "
                f"{r.choice(SUBJECTS)} {r.choice(FEEL)}.")
    if k == 3:
        return r.choice(WEATHER).format(d=r.choice(DIRS), s=r.choice(SEAS), t=r.choice(["morning", "afternoon", "night"]),
                                        a=r.choice(ADJS), n=r.choice(NOUNS))
    if k == 4:
        return f"It was a {r.choice(ADJS)} {r.choice(NOUNS)}, and {r.choice(SUBJECTS)} {r.choice(FEEL)}."
    n = r.randrange(2, 9)
    return f"{cap(r.choice(SUBJECTS))} counted {n} boats {r.choice(PLACES)} {r.choice(TIMES)}."


def main():
    r = random.Random(2026)
    out = [INTRO]
    size = len(INTRO)
    day = 1
    while size < 40000:
        para = f"Day {day}. " + " ".join(sentence(r) for _ in range(r.randrange(3, 7))) + "\n\n"
        out.append(para)
        size += len(para)
        day += 1
    print("".join(out), end="")


if __name__ == "__main__":
    main()
