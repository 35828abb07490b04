"""Data synthesis: question/SQL pairs for a database nobody labelled.

- :mod:`~sqlweave.synthesis.templates`: SQL templates filled from one schema's stored values;
- :mod:`~sqlweave.synthesis.drafts`: a filled template kept only if it is a good label;
- :mod:`~sqlweave.synthesis.pairs`: the LM writes each question, a program's answer checks it
  (the round trip), the pairs go to a resumable questions file (:func:`synthesize`);
- :mod:`~sqlweave.synthesis.sets`: pairs for each database of a compile, split into train and
  validation, with the artefact's record of them (:func:`synthetic_sets`).

It makes data; it optimizes nothing (compiling is :mod:`sqlweave.optimizers`). It stands above
the programs: the round trip asks one.
"""
