import sys, time, sqlite3, json
from llama_cpp import Llama
from sqlweave.data import load_spider, open_database, eval_slice
from sqlweave.metrics import execution_match
from sqlweave.sqltext import extract_sql
from sqlweave.schema import introspect
from sqlweave.signatures import GenerateSQL
from sqlweave.lm import _continue_assistant
llm = Llama("/root/.cache/sqlweave/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", n_ctx=4096, n_threads=2, verbose=False)
dev = eval_slice(load_spider("dev"), n=100, seed=0)[:int(sys.argv[1])]
def compact(s):
    out=[]
    for t in s.tables:
        items=[f'"{c.name}" {c.type}'.rstrip() for c in t.columns]
        if t.primary_key: items.append("PRIMARY KEY (" + ", ".join(f'"{k}"' for k in t.primary_key) + ")")
        for fk in s.foreign_keys:
            if fk.table==t.name: items.append(f'FOREIGN KEY ("{fk.column}") REFERENCES "{fk.ref_table}" ("{fk.ref_column}")')
        out.append(f'CREATE TABLE "{t.name}" (' + ", ".join(items) + ")")
    return "\n".join(out)
instr = "\n".join("-- "+l.strip() for l in GenerateSQL.instructions.splitlines() if l.strip())
score={}
for i,ex in enumerate(dev):
    db = open_database(ex); c = compact(introspect(db))
    base = f"{c}\n\n-- Using valid SQLite, answer the following question for the tables provided above.\n-- {ex.question}\n"
    withi = f"{c}\n\n{instr}\n-- Using valid SQLite, answer the following question for the tables provided above.\n-- {ex.question}\n"
    V = {"V4_compact": lambda: llm.create_chat_completion(messages=[{"role":"user","content":base}], temperature=0.0, max_tokens=256)["choices"][0]["message"]["content"],
         "V5_compact_instr": lambda: llm.create_chat_completion(messages=[{"role":"user","content":withi}], temperature=0.0, max_tokens=256)["choices"][0]["message"]["content"],
         "V6_compact_instr_prefill": lambda: _continue_assistant(llm, [{"role":"user","content":withi},{"role":"assistant","content":"SELECT"}], {"temperature":0.0,"max_tokens":256})["choices"][0]["message"]["content"]}
    for k,f in V.items():
        sql = extract_sql(f())
        ok = execution_match(sql, ex.gold_sql, db); score.setdefault(k,[]).append(ok)
        print(i, k, ok, sql.replace("\n"," ")[:100], flush=True)
print({k:sum(v) for k,v in score.items()}, len(dev))
