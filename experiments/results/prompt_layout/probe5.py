import sys, time, sqlite3, json
from llama_cpp import Llama
from sqlweave.data import load_spider, open_database, eval_slice
from sqlweave.metrics import execution_match
from sqlweave.sqltext import extract_sql
from sqlweave.schema import introspect, render_ddl
from sqlweave.adapter import SQLAdapter
from sqlweave.signatures import GenerateSQL
llm = Llama("/root/.cache/sqlweave/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", n_ctx=4096, n_threads=2, verbose=False)
dev = eval_slice(load_spider("dev"), n=100, seed=0)
def raw_ddl(db):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    return "\n".join(r[0] for r in con.execute("select sql from sqlite_master where type='table' and sql is not null"))
tpl = lambda s, q: f"{s}\n\n-- Using valid SQLite, answer the following question for the tables provided above.\n-- {q}\n"
score={}
for i,ex in enumerate(dev):
    db = open_database(ex); ours = render_ddl(introspect(db)); raw = raw_ddl(ex.db_path)
    user = SQLAdapter()._plain_messages(GenerateSQL,[],dict(dialect="sqlite",db_schema=ours,question=ex.question,evidence=""),prefill=False)[1:]
    V = {"V1_ourddl": [{"role":"user","content":tpl(ours, ex.question)}],
         "V2_sys": [{"role":"system","content":GenerateSQL.instructions},{"role":"user","content":tpl(raw, ex.question)}],
         "V3_ouruser_nosys": user}
    for k,m in V.items():
        sql = extract_sql(llm.create_chat_completion(messages=m, temperature=0.0, max_tokens=256)["choices"][0]["message"]["content"])
        ok = execution_match(sql, ex.gold_sql, db); score.setdefault(k,[]).append(ok)
        print(i, k, ok, sql.replace("\n"," ")[:100], flush=True)
print({k:sum(v) for k,v in score.items()}, len(dev))
