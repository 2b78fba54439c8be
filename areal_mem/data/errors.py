"""The one error type of the data readers: it names the file and the line or row."""


class DataError(ValueError):
    pass
