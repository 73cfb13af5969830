"""The built-in workloads, each made to show one thing about the scheduler."""

from __future__ import annotations

from collections.abc import Callable

from engine.workload.item import WorkloadItem

# Written for the default model, trained on Shakespeare's plays, so prompts are in its
# language. Token counts quoted below are for its tokenizer; verse, with its capitals and
# punctuation, takes nearly two tokens a word.

_SHORT_PROMPTS = [
    "ROMEO:\nBut soft, what light through yonder window breaks?",
    "JULIET:\nO Romeo, Romeo, wherefore art thou Romeo?",
    "HAMLET:\nWhat a piece of work is a man!",
    "MACBETH:\nIs this a dagger which I see before me?",
    "KING LEAR:\nBlow, winds, and crack your cheeks!",
    "PUCK:\nLord, what fools these mortals be!",
    "OTHELLO:\nIt is the cause, it is the cause, my soul.",
    "VIOLA:\nI am not what I am.",
    "PROSPERO:\nWe are such stuff as dreams are made on.",
    "FALSTAFF:\nThe better part of valour is discretion.",
    "BEATRICE:\nI had rather hear my dog bark at a crow,",
    "HENRY V:\nWe few, we happy few, we band of brothers;",
]

_MERCY = """PORTIA:
The quality of mercy is not strained;
It droppeth as the gentle rain from heaven
Upon the place beneath. It is twice blest;
It blesseth him that gives and him that takes.
'Tis mightiest in the mightiest; it becomes
The throned monarch better than his crown.
His sceptre shows the force of temporal power,
The attribute to awe and majesty,
Wherein doth sit the dread and fear of kings;
But mercy is above this sceptred sway;
It is enthroned in the hearts of kings,
It is an attribute to God himself;
And earthly power doth then show likest God's
When mercy seasons justice."""

_TO_BE = """HAMLET:
To be, or not to be, that is the question:
Whether 'tis nobler in the mind to suffer
The slings and arrows of outrageous fortune,
Or to take arms against a sea of troubles,
And by opposing end them. To die, to sleep;
No more; and by a sleep to say we end
The heart-ache and the thousand natural shocks
That flesh is heir to: 'tis a consummation
Devoutly to be wish'd. To die, to sleep;
To sleep, perchance to dream: ay, there's the rub;
For in that sleep of death what dreams may come,
When we have shuffled off this mortal coil,
Must give us pause: there's the respect
That makes calamity of so long life."""

_SEVEN_AGES = """JAQUES:
All the world's a stage,
And all the men and women merely players;
They have their exits and their entrances,
And one man in his time plays many parts,
His acts being seven ages. At first the infant,
Mewling and puking in the nurse's arms.
Then the whining schoolboy, with his satchel
And shining morning face, creeping like snail
Unwillingly to school. And then the lover,
Sighing like furnace, with a woeful ballad
Made to his mistress' eyebrow. Then a soldier,
Full of strange oaths, and bearded like the pard,
Jealous in honour, sudden and quick in quarrel,
Seeking the bubble reputation
Even in the cannon's mouth. And then the justice,
In fair round belly with good capon lined,
With eyes severe and beard of formal cut,
Full of wise saws and modern instances;
And so he plays his part."""

# About 55 tokens: more than three 16-token pages that every request of the preset shares.
_PREAMBLE = """CHORUS:
O for a Muse of fire, that would ascend
The brightest heaven of invention,
A kingdom for a stage, princes to act
And monarchs to behold the swelling scene!
"""

_QUESTIONS = [
    "KING:\nWhat news from France?",
    "QUEEN:\nWhere is my son?",
    "HERALD:\nThe day is yours.",
    "SOLDIER:\nWho goes there?",
    "LORD:\nHow fares the king?",
    "PAGE:\nMy lord, the horses wait.",
]


def chat_mix() -> list[WorkloadItem]:
    """Short prompts, outputs from a few tokens to many, arriving a few steps apart:
    watch requests join and leave the running batch while decodes keep flowing."""
    lengths = [12, 48, 6, 32, 64, 8, 24, 40]
    arrivals = [0, 0, 2, 3, 5, 8, 9, 12]
    return [WorkloadItem(p, max_tokens=n, arrival_step=a, ignore_eos=i % 2 == 0)
            for i, (p, n, a) in enumerate(zip(_SHORT_PROMPTS[:8], lengths, arrivals, strict=True))]


def chats_and_speeches() -> list[WorkloadItem]:
    """Short chats and three long speeches in the first ten steps: within 20 steps a prompt is
    split to fit the token budget, the pool fills, and a speech waits for pages.

    The lab's first workload, so that each of the scheduler's limits shows early: at step 2 two
    speeches (about 440 tokens) outgrow the 256-token budget and the second runs in chunks; the
    pool fills to 54 of its 64 pages; from step 10 the last speech waits for pages while the
    decodes keep flowing. Its first-token time moves with the budget (p50 6.5 steps at 64 tokens,
    1 at 256), where chat_mix's stays at 1."""
    short = [(0, 24, 0), (1, 40, 0), (2, 16, 1), (3, 24, 3), (4, 48, 6), (5, 12, 8)]
    items = [WorkloadItem(_SHORT_PROMPTS[i], max_tokens=n, arrival_step=a, ignore_eos=True) for i, n, a in short]
    items += [WorkloadItem(speech, max_tokens=n, arrival_step=a, ignore_eos=True)
              for speech, n, a in ((_SEVEN_AGES, 32, 2), (_TO_BE, 32, 2), (_MERCY, 40, 5), (_SEVEN_AGES, 32, 10))]
    return sorted(items, key=lambda item: item.arrival_step)


def long_prompts() -> list[WorkloadItem]:
    """Three long speeches (about 175, 195 and 245 tokens) beside short prompts: with a
    small token budget and chunked prefill, long prompts run in chunks while the
    short requests keep decoding; without chunking, they stall everyone behind them."""
    items = [WorkloadItem(p, max_tokens=24, arrival_step=a, ignore_eos=True)
             for p, a in zip(_SHORT_PROMPTS[:5], [0, 0, 1, 2, 3], strict=True)]
    for long, a in ((_SEVEN_AGES, 1), (_MERCY, 4), (_TO_BE, 6)):
        items.append(WorkloadItem(long, max_tokens=32, arrival_step=a, ignore_eos=True))
    return sorted(items, key=lambda item: item.arrival_step)


def shared_system_prompt() -> list[WorkloadItem]:
    """One ~55-token preamble, then a different line each: with prefix caching on, later
    requests reuse the preamble's full pages instead of computing them again."""
    return [WorkloadItem(_PREAMBLE + q, max_tokens=24, arrival_step=2 * i, ignore_eos=True)
            for i, q in enumerate(_QUESTIONS)]


def burst() -> list[WorkloadItem]:
    """Sixteen requests at step 0 whose full lengths (about 1,400 tokens) outgrow the
    default 64-page pool of 16-token pages: running requests must be preempted."""
    k = len(_SHORT_PROMPTS)
    return [WorkloadItem(f"{_SHORT_PROMPTS[i % k]}\n{_SHORT_PROMPTS[(i + 5) % k]}", max_tokens=48 + 4 * (i % 5),
                         ignore_eos=True) for i in range(16)]


def mixed_priorities() -> list[WorkloadItem]:
    """Long, low-priority jobs (priority 2) start first; urgent short requests (priority 0)
    arrive later. Under scheduling_policy='priority' with a small max_num_seqs or pool,
    the urgent ones jump the queue and can preempt the long jobs."""
    items = [WorkloadItem(p, max_tokens=96, priority=2, arrival_step=0, ignore_eos=True)
             for p in (_MERCY, _SHORT_PROMPTS[3], _SHORT_PROMPTS[4])]
    items += [WorkloadItem(_SHORT_PROMPTS[5 + i], max_tokens=12, priority=0 if i % 2 == 0 else 1,
                           arrival_step=4 + 3 * i, ignore_eos=True) for i in range(5)]
    return items


PRESETS: dict[str, Callable[[], list[WorkloadItem]]] = {
    "chats_and_speeches": chats_and_speeches,
    "chat_mix": chat_mix,
    "long_prompts": long_prompts,
    "shared_system_prompt": shared_system_prompt,
    "burst": burst,
    "mixed_priorities": mixed_priorities,
}
