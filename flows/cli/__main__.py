from flows.cli import app

app()
