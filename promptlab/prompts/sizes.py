"""The sizes a template, a message and one render may reach: plain numbers, no jinja2.

Checked where templates are saved and rendered (promptlab/prompts/limits.py, which
re-exports them, with the render budget that counts against them) and where a request
file's messages are checked (promptlab/data/batchfile.py): a run over prepared requests
checks the same bounds without loading jinja2.
"""

from __future__ import annotations

#: Characters in one message, and in a whole template (its canonical JSON), at save time.
#: Every listing reads stored versions whole, and DuckDB works in 64 MB (store/connection.py):
#: a 20 MB message ran it out of memory. 200k characters is a long book chapter.
MAX_MESSAGE_CHARS = 200_000
MAX_TEMPLATE_CHARS = 1_000_000
#: Nesting of tags, filters and operators. Real prompts stay under 10 levels; Jinja's parser
#: and compiler recurse (about 15 Python frames a level) and CPython refuses code nested
#: 100 deep, so deeper templates would end in RecursionError or SyntaxError.
MAX_TEMPLATE_DEPTH = 40
#: `for` loops inside one another. CPython compiles at most 20 nested blocks, and every
#: extra level multiplies the work of a render.
MAX_NESTED_LOOPS = 8
#: Characters one render may produce, all messages together. A million characters is about
#: 250k tokens, more than the context window of the models we call; counted as the text
#: streams out, so a runaway template stops before it holds much memory.
MAX_RENDERED_CHARS = 1_000_000
#: Loop iterations one render may run, all loops of all messages together: room to loop
#: over thousands of items a few times, far short of the 13 million of four nested loops
#: over 60 items (a 95 MB prompt that took 3.9 GB to render).
MAX_LOOP_ITERATIONS = 100_000
