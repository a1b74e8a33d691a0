// UI text: Japanese by default (the operators' language), English on request.
const TEXT = {
  ja: {
    skip: "本文へ移動", console: "コンソール", logout: "ログアウト", lang: "English",
    "nav.jobs": "ジョブ", "nav.ingest": "取り込み", "nav.labels": "ラベル", "nav.duplicates": "重複", "nav.health": "状態",
    "login.title": "ログイン", "login.token": "アクセストークン", "login.submit": "ログイン",
    "login.bad": "トークンが正しくありません", "login.needed": "ログインしてください", "loggedout": "ログアウトしました",
    loading: "読み込み中…", error: "エラー", none: "なし",
    "jobs.title": "ジョブ", "jobs.kind": "種類", "jobs.state": "状態", "jobs.progress": "進捗", "jobs.counts": "件数",
    "jobs.age": "経過", "jobs.empty": "ジョブはまだありません", "jobs.filterKind": "種類で絞り込み", "jobs.all": "すべて",
    "job.title": "ジョブ", "job.cancel": "キャンセル", "job.cancelled": "キャンセルしました", "job.items": "項目",
    "job.retry": "失敗した項目を再実行", "job.retried": "再実行ジョブを開始しました",
    "job.lost": "再実行できない項目 (もう一度アップロードしてください)", "job.parent": "元のジョブ",
    "job.thumb": "画像", "job.name": "名前", "job.outcome": "結果", "job.mergedInto": "統合先", "job.why": "理由",
    "job.error": "エラー", "job.noItems": "まだ項目はありません",
    "out.indexed": "登録", "out.dedup": "重複として統合", "out.failed": "失敗", "out.document": "文書",
    "state.queued": "待機中", "state.running": "実行中", "state.succeeded": "成功", "state.failed": "失敗", "state.cancelled": "取消",
    "counts": "登録 {indexed}・重複 {dedup}・失敗 {failed}",
    "ingest.title": "写真の取り込み", "ingest.drop": "写真のフォルダをここにドロップ、または選択してください",
    "ingest.files": "写真ファイル", "ingest.folder": "フォルダ", "ingest.fields": "項目ファイル (CSV/JSONL、任意)",
    "ingest.category": "カテゴリ", "ingest.submit": "取り込む", "ingest.selected": "{n} 枚を選択",
    "ingest.none": "写真を選んでください", "ingest.started": "ジョブ {id} を開始しました", "ingest.exact": "同じ画像がすでに登録されています: {id}",
    "ingest.fieldsRows": "{n} 行の項目を読み込みました",
    "cat.sake": "日本酒", "cat.juice": "ジュース", "cat.any": "すべて",
    "labels.title": "ラベル", "labels.query": "検索語", "labels.search": "検索", "labels.region": "地域", "labels.brewery": "蔵元",
    "labels.sort": "並び順", "sort.relevance": "関連度", "sort.recency": "新しい順", "labels.photo": "写真で検索",
    "labels.empty": "該当するラベルはありません", "labels.more": "もっと見る", "labels.photoMatch": "写真のラベル: {id}", "labels.photoNotFound": "写真のラベルはラベル帳にありません（近いラベルを表示）",
    "label.title": "ラベル", "label.fields": "項目", "label.field": "項目", "label.value": "値", "label.source": "出典",
    "label.confidence": "確度", "label.correct": "修正", "label.save": "保存", "label.saved": "保存しました",
    "label.read": "読み取ったテキスト", "label.noRecord": "このラベルの詳細 API はまだありません (画像のみ表示)",
    "label.duplicates": "統合された画像", "label.noRead": "読み取り結果はありません", "label.readPending": "取り込み後に読み取ります (項目がそろっていたため)", "label.readFailed": "取り込み後の読み取りに失敗しました (送られた項目のままです)",
    "src.uploader": "登録者", "src.ocr": "OCR", "src.llm": "LLM", "src.corrected": "修正済み",
    "f.brand_name": "銘柄", "f.product_name": "商品名", "f.brewery": "蔵元", "f.region": "地域", "f.category": "カテゴリ",
    "f.label_features": "特徴", "f.text": "テキスト",
    "dups.title": "重複", "dups.kept": "残したラベル", "dups.merged": "統合された画像", "dups.distance": "距離",
    "dups.reason": "理由", "dups.score": "照合スコア", "dups.split": "分割", "dups.splitDone": "分割しました: {id}",
    "dups.merge": "2つのラベルを統合", "dups.keep": "残すラベル ID", "dups.duplicate": "重複とするラベル ID",
    "dups.mergeBtn": "統合", "dups.mergeDone": "{dup} を {keep} に統合しました", "dups.empty": "重複はありません",
    "dups.decisions": "判断の記録", "dups.action": "操作", "dups.label": "ラベル", "dups.other": "相手", "dups.who": "誰が", "dups.when": "いつ",
    "reason.exact": "同一バイト", "reason.near-duplicate": "類似画像 (pHash+照合)", "reason.manual": "手動統合",
    "act.split": "分割", "act.merge": "統合",
    "health.title": "状態", "health.stores": "ストア", "health.queues": "キュー", "health.depth": "待ち",
    "health.workers": "ワーカー", "health.model": "埋め込みモデル", "health.active": "使用中のコレクション",
    "health.reembed": "再埋め込み", "health.building": "作成中 (完了後に切替)", "health.noReembed": "実行中の再埋め込みはありません",
    "health.collections": "コレクション", "health.overall": "全体", "health.noWorkers": "応答したワーカーはありません",
    "health.version": "バージョン", "health.size": "件数",
    ago: "{n}{u}前", "u.s": "秒", "u.m": "分", "u.h": "時間", "u.d": "日",
  },
  en: {
    skip: "Skip to content", console: "console", logout: "Log out", lang: "日本語",
    "nav.jobs": "Jobs", "nav.ingest": "Ingest", "nav.labels": "Labels", "nav.duplicates": "Duplicates", "nav.health": "Health",
    "login.title": "Log in", "login.token": "Access token", "login.submit": "Log in",
    "login.bad": "That token is not valid", "login.needed": "Please log in", "loggedout": "Logged out",
    loading: "Loading…", error: "Error", none: "none",
    "jobs.title": "Jobs", "jobs.kind": "Kind", "jobs.state": "State", "jobs.progress": "Progress", "jobs.counts": "Counts",
    "jobs.age": "Age", "jobs.empty": "No jobs yet", "jobs.filterKind": "Filter by kind", "jobs.all": "all",
    "job.title": "Job", "job.cancel": "Cancel", "job.cancelled": "Cancelled", "job.items": "Items",
    "job.retry": "Re-run failed items", "job.retried": "Started a job re-running the failed items",
    "job.lost": "Items that cannot be re-run (upload them again)", "job.parent": "re-run of",
    "job.thumb": "Image", "job.name": "Name", "job.outcome": "Outcome", "job.mergedInto": "Merged into", "job.why": "Why",
    "job.error": "Error", "job.noItems": "No items yet",
    "out.indexed": "indexed", "out.dedup": "merged (duplicate)", "out.failed": "failed", "out.document": "document",
    "state.queued": "queued", "state.running": "running", "state.succeeded": "succeeded", "state.failed": "failed", "state.cancelled": "cancelled",
    "counts": "{indexed} indexed · {dedup} merged · {failed} failed",
    "ingest.title": "Ingest photos", "ingest.drop": "Drop a folder of photos here, or choose them",
    "ingest.files": "Photo files", "ingest.folder": "Folder", "ingest.fields": "Fields file (CSV/JSONL, optional)",
    "ingest.category": "Category", "ingest.submit": "Ingest", "ingest.selected": "{n} photos selected",
    "ingest.none": "Choose some photos", "ingest.started": "Started job {id}", "ingest.exact": "This exact image is already indexed: {id}",
    "ingest.fieldsRows": "Read fields for {n} rows",
    "cat.sake": "sake", "cat.juice": "juice", "cat.any": "any",
    "labels.title": "Labels", "labels.query": "Search words", "labels.search": "Search", "labels.region": "Region", "labels.brewery": "Brewery",
    "labels.sort": "Order", "sort.relevance": "relevance", "sort.recency": "newest", "labels.photo": "Search by photo",
    "labels.empty": "No labels match", "labels.more": "More", "labels.photoMatch": "The photo shows {id}", "labels.photoNotFound": "The label in the photo is not in the book (nearest labels shown)",
    "label.title": "Label", "label.fields": "Fields", "label.field": "Field", "label.value": "Value", "label.source": "Source",
    "label.confidence": "Confidence", "label.correct": "Correct", "label.save": "Save", "label.saved": "Saved",
    "label.read": "Read text", "label.noRecord": "This server has no label-detail API yet (image only)",
    "label.duplicates": "Merged uploads", "label.noRead": "No read text", "label.readPending": "Read after the ingest (sent with full fields)", "label.readFailed": "The read after the ingest failed (the fields sent are kept)",
    "src.uploader": "uploader", "src.ocr": "OCR", "src.llm": "LLM", "src.corrected": "corrected",
    "f.brand_name": "Brand", "f.product_name": "Product", "f.brewery": "Brewery", "f.region": "Region", "f.category": "Category",
    "f.label_features": "Features", "f.text": "Text",
    "dups.title": "Duplicates", "dups.kept": "Kept label", "dups.merged": "Merged uploads", "dups.distance": "Distance",
    "dups.reason": "Reason", "dups.score": "Verifier score", "dups.split": "Split", "dups.splitDone": "Split off as {id}",
    "dups.merge": "Merge two labels", "dups.keep": "Label to keep (id)", "dups.duplicate": "Its duplicate (id)",
    "dups.mergeBtn": "Merge", "dups.mergeDone": "Merged {dup} into {keep}", "dups.empty": "No duplicates",
    "dups.decisions": "Decisions", "dups.action": "Action", "dups.label": "Label", "dups.other": "Other label", "dups.who": "Who", "dups.when": "When",
    "reason.exact": "same bytes", "reason.near-duplicate": "near-duplicate (pHash + verifier)", "reason.manual": "merged by hand",
    "act.split": "split", "act.merge": "merge",
    "health.title": "Health", "health.stores": "Stores", "health.queues": "Queues", "health.depth": "Waiting",
    "health.workers": "Workers", "health.model": "Embedding model", "health.active": "Active collection",
    "health.reembed": "Re-embed", "health.building": "Building (swapped in when done)", "health.noReembed": "No re-embed running",
    "health.collections": "Collections", "health.overall": "Overall", "health.noWorkers": "No worker answered",
    "health.version": "Version", "health.size": "Size",
    ago: "{n}{u} ago", "u.s": "s", "u.m": "m", "u.h": "h", "u.d": "d",
  },
};

let lang = localStorage.getItem("yana.lang") === "en" ? "en" : "ja";

export function getLang() { return lang; }

export function setLang(l) {
  lang = l === "en" ? "en" : "ja";
  localStorage.setItem("yana.lang", lang);
  document.documentElement.lang = lang;
}

export function t(key, vars = {}) {
  const s = TEXT[lang][key] ?? TEXT.ja[key] ?? key;
  return s.replace(/\{(\w+)\}/g, (_, k) => (vars[k] ?? ""));
}

export function translateStatic(root = document) {
  root.querySelectorAll("[data-i18n]").forEach((el) => { el.textContent = t(el.dataset.i18n); });
}
