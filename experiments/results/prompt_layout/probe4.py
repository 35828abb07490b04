import sys, time, sqlite3, json
from llama_cpp import Llama
from sqlweave.data import load_spider, open_database, eval_slice
from sqlweave.metrics import execution_match
from sqlweave.sqltext import extract_sql
llm = Llama("/root/.cache/sqlweave/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", n_ctx=4096, n_threads=2, verbose=False)
dev = eval_slice(load_spider("dev"), n=100, seed=0)
prev = {json.loads(l)["question_id"]: json.loads(l)["correct"] for l in open("experiments/results/programs/direct__full__1.5b__spider100.jsonl")}
def raw_ddl(db):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    return "\n".join(r[0] for r in con.execute("select sql from sqlite_master where type='table' and sql is not null"))
n=ok_n=ok_o=0
for i,ex in enumerate(dev):
    db = open_database(ex)
    m=[{"role":"user","content":f"{raw_ddl(ex.db_path)}\n\n-- Using valid SQLite, answer the following question for the tables provided above.\n-- {ex.question}\n"}]
    sql = extract_sql(llm.create_chat_completion(messages=m, temperature=0.0, max_tokens=256)["choices"][0]["message"]["content"])
    ok = execution_match(sql, ex.gold_sql, db); n+=1; ok_n+=ok; ok_o+=bool(prev.get(ex.question_id))
    print(i, ex.difficulty, ok, prev.get(ex.question_id), sql.replace("\n"," ")[:120], flush=True)
print("naive", ok_n, "ours", ok_o, "of", n)
