# Tests are not read by the scan: this write must not count.
import requests


def test_charges():
    requests.post("https://pay.example/charges", json={"amount": 1})
