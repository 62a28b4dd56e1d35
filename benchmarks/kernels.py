"""stub"""
def add_args(ap):
    pass
