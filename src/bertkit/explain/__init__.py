"""The explainer page: JSON views of one sentence, the static page, its routes and the offline HTML.

May import encoder, io, tasks.
"""
