# Sphinx configuration of the course's book (`make book`; course_tools/book.py writes the pages beside this file).
# The notebooks arrive executed: MyST-NB renders their saved outputs and runs nothing.
project = "LLM post-training, from scratch and for real"
author = "the course's authors"
language = "en"

extensions = ["myst_nb"]
exclude_patterns = ["_build", "_doctrees", "**.ipynb_checkpoints"]

nb_execution_mode = "off"         # outputs come from `make course`'s run; a book build never trains anything
nb_merge_streams = True
nb_render_markdown_format = "myst"   # Markdown outputs (the course's tables) with tables; the default has none
nb_output_stderr = "show"         # library messages stay visible; messages.md says which are expected and why
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "html_image"]
myst_heading_anchors = 3
suppress_warnings = ["mystnb.unknown_mime_type", "myst.header"]   # a notebook's outputs may carry extra MIME types

# MathJax 3 from the copy the sphinx-mathjax-offline package ships (no network), SVG output: it needs no web fonts,
# which a page opened from disk (file://) may not load. Only the files a page asks for are copied (3 of its 24 MB).
mathjax_path = "mathjax/tex-svg.js"
MATHJAX_FILES = ["tex-svg.js", "input/tex/extensions", "ui", "a11y"]
mathjax3_config = {"tex": {"inlineMath": [["\\(", "\\)"]], "displayMath": [["\\[", "\\]"]]}}

html_theme = "sphinx_book_theme"
html_title = "LLM post-training"
html_static_path = ["_static"]
html_css_files = ["course.css"]
html_copy_source = False
html_show_sourcelink = False
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": True,
    "home_page_in_toc": True,
}
html_last_updated_fmt = None
html_context = {"default_mode": "light"}   # without it the theme logs an error on a first visit from disk
html_show_search_summary = False   # a summary fetches each result page, which a page opened from disk may not do


def _copy_mathjax(app, exc):
    import importlib.util
    import shutil
    from pathlib import Path
    if exc is not None:
        return
    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None:
        raise RuntimeError("the book needs the package sphinx-mathjax-offline (make install puts it in .venv)")
    source = Path(spec.origin).parent / "static" / "mathjax"
    target = Path(app.outdir) / "_static" / "mathjax"
    for name in MATHJAX_FILES:
        if (source / name).is_dir():
            shutil.copytree(source / name, target / name, dirs_exist_ok=True)
        else:
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / name, target / name)


def setup(app):
    app.connect("build-finished", _copy_mathjax)
